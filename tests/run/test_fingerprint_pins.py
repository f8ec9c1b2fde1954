"""Finished runs stay finished: the recipe part of every stage's fingerprint is pinned for the
shipped recipes.

A stage re-runs when its fingerprint changes, so a refactor that changes a section hash (a new key
in a slice, a default written differently, a field renamed) makes every user's finished run, a 7B
one included, run again from that stage. Session 18 caught one by hand (an unset default resolved
per road changed every recipe's embeddings hash); this makes it a failing test. When a change is
meant to re-run a stage (its output changes), update the pin in the same commit and say so.

Changed pins: evaluate's, in session 19 (review s19 F1/F3): its print no longer covers the planning
input (`cluster`, `engine`, both stages, the mixture) for the report's estimated-energy column, which
is read from the plan.json the pipeline writes; it covers the `evaluation` section and, outside
this recipe part, the suites' data files and the compare models. Finished runs re-run evaluate
once, and export after it (its print chains evaluate's; its recipe part, pinned here, holds).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from langadapt.pipeline.stages import stage_table
from langadapt.recipe import load_recipe
from langadapt.run.fingerprint import recipe_hash

ROOT = Path(__file__).resolve().parents[2]
PINS = {
    "recipes/tiny_norwegian_warm.yaml": {
        "data": "8cdde761166c8456", "tokenizer": "78b1861bdc356011", "embeddings": "4aec218b4e25d1ab",
        "stage1": "b6947516152ad9d3", "stage2": "14e60c27aab4f3b1", "evaluate": "deb1353b8fb64ae4",
        "export": "0de0f4170ec2e8ef"},
    "recipes/norwegian_warm.yaml": {
        "data": "dcf007c59e13f0dd", "tokenizer": "b555ffa8d0f3eedd", "embeddings": "465c0302384ddbec",
        "stage1": "ebf4b43d0ee19a18", "stage2": "b235b14977bdaec4", "evaluate": "8d28934c67ab847e",
        "export": "5c1a1d19edf7cff7"},
}


@pytest.mark.parametrize("recipe", sorted(PINS))
def test_each_stages_recipe_hash_is_what_finished_runs_recorded(recipe: str, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    loaded = load_recipe(recipe, [])
    hashes = {stage.name: recipe_hash(loaded, stage) for stage in stage_table(loaded.recipe)}
    changed = {name: (PINS[recipe].get(name), got) for name, got in hashes.items() if PINS[recipe].get(name) != got}
    assert not changed, (f"{recipe}: these stages' recipe hashes changed, so every finished run re-runs "
                         f"from them: {changed}")


@pytest.mark.parametrize("recipe", sorted(PINS))
def test_the_mfu_columns_peak_retrains_nothing_and_moves_no_pin(recipe: str, monkeypatch) -> None:
    """`engine.peak_tflops` only scales the MFU column: the training stages hash it at its default
    (`reads(..., at_default=...)`), so setting it leaves their pins, and unset it hashes as it always did."""
    monkeypatch.chdir(ROOT)
    loaded = load_recipe(recipe, ["engine.peak_tflops=312"])
    hashes = {stage.name: recipe_hash(loaded, stage) for stage in stage_table(loaded.recipe)}
    assert hashes == PINS[recipe]
    assert loaded.recipe.engine.peak_tflops == 312  # hashed at its default, not changed


def test_unset_head_init_is_hashed_as_same_except_on_the_extension(monkeypatch) -> None:
    """Why the pins above hold with a per-road default: the recipe's full dump (what `section_hash`
    hashes) shows an unset head_init as `same` for every kind but extend, and as unset on extend,
    where the embeddings stage decides from the base; the recipe itself leaves it unset."""
    monkeypatch.chdir(ROOT)
    recipe = "recipes/tiny_norwegian_warm.yaml"

    def hashed(overrides: list[str]) -> object:
        return load_recipe(recipe, overrides).recipe.model_dump(mode="json")["embeddings"]["head_init"]

    assert hashed([]) == "same" and load_recipe(recipe, []).recipe.embeddings.head_init is None
    assert hashed(["tokenizer.kind=keep_base"]) == "same"
    assert hashed(["tokenizer.kind=extend"]) is None
    assert hashed(["tokenizer.kind=extend", "embeddings.head_init=zero"]) == "zero"
