"""`global_batch_size` (a key added after runs finished) leaves every stage's recipe hash as it was
while unset, and changes the training stages' hashes when set: the pins in
test_fingerprint_pins.py hold, and a recipe that fixes its batch trains again."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_fingerprint_pins import PINS

from langadapt.pipeline.stages import stage_table
from langadapt.recipe import load_recipe
from langadapt.run.fingerprint import section_hash

ROOT = Path(__file__).resolve().parents[2]


def _hashes(recipe: str, overrides: list[str]) -> dict[str, str]:
    loaded = load_recipe(recipe, overrides)
    return {stage.name: section_hash(loaded.recipe, stage.sections, ignore=stage.ignores)
            for stage in stage_table(loaded.recipe)}


@pytest.mark.parametrize("recipe", sorted(PINS))
def test_unset_or_null_is_hashed_as_before_and_set_changes_training(recipe: str, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    loaded = load_recipe(recipe, [])
    assert "global_batch_size" not in loaded.recipe.model_dump(mode="json")["stage1"]
    assert _hashes(recipe, []) == PINS[recipe]
    assert _hashes(recipe, ["stage1.global_batch_size=null", "stage2.global_batch_size=null"]) == PINS[recipe]
    micro = loaded.recipe.stage1.micro_batch_size * loaded.recipe.stage1.grad_accum_steps
    fixed = _hashes(recipe, [f"stage1.global_batch_size={micro * loaded.recipe.cluster.world_size}"])
    changed = {name for name in fixed if fixed[name] != PINS[recipe][name]}
    assert {"stage1", "stage2"} <= changed and not changed & {"data", "tokenizer", "embeddings"}
