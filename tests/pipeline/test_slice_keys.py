"""Slices are exactly what a stage reads (issue 39 item 3): every field of every stage's slice
declares the recipe keys it holds (`recipe.slices.reads`), the stage's fingerprint covers those keys
and nothing else but what the stage reads through `ctx`, each declaration is true to the value the
table put in the field, and the fingerprint hashes the outside files a stage declares whatever its name."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from langadapt.pipeline.stages import Stage, stage_table
from langadapt.recipe import load_recipe
from langadapt.recipe.slices import declared, reads, recipe_keys
from langadapt.run.fingerprint import OutsideFiles, fingerprints

REPO = Path(__file__).resolve().parents[2]
RECIPES = ("recipes/tiny_norwegian_warm.yaml", "recipes/tiny_english_source.yaml", "recipes/norwegian_warm.yaml",
           "recipes/norwegian_extend.yaml", "recipes/normistral_11b_warm.yaml")
"""Warm, scratch (its own embeddings entry), extended-tokenizer and multi-node recipes."""
THROUGH_CONTEXT = {"tokenizer": {"base_model"}, "embeddings": {"embeddings", "init", "base_model"}}
"""What a stage's print covers besides its slice: the base model folder it reads through
`ctx.base_model`, and for embeddings which entry runs (`init`) and the warm entry's section, which
a scratch model's print kept when the keys came to be declared per field."""
DERIVED = {("TrainingSlice", "mixture"), ("ExportSlice", "facts")}
"""Fields computed from their keys (the stage's mixture, the model card's facts), not a copy of them."""


def _tables(tmp_path: Path) -> list[tuple[str, Any, list[Stage]]]:
    tables = []
    for recipe in RECIPES:
        loaded = load_recipe(REPO / recipe, [f"run_root={tmp_path}"])
        tables.append((recipe, loaded, stage_table(loaded.recipe)))
    return tables


def _pick(tree: Any, keys: list[str]) -> Any:
    """The value at the dotted key `keys` (split) of a dumped recipe; `name[]` maps over that list."""
    if not keys:
        return tree
    key, rest = keys[0], keys[1:]
    return [_pick(item, rest) for item in tree[key[:-2]]] if key.endswith("[]") else _pick(tree[key], rest)


def _inside(key: str, keys: set[str]) -> bool:
    """`key` is one of `keys` or a part of one (`base_model.architecture` of `base_model`)."""
    parts = key.replace("[]", "").split(".")
    return any(parts[: len(outer)] == outer for outer in (k.replace("[]", "").split(".") for k in keys))


def test_every_print_covers_exactly_what_its_slice_declares(tmp_path: Path) -> None:
    for recipe, _, table in _tables(tmp_path):
        for stage in table:
            rows = declared(stage.run.slice)  # raises for a field declared without `reads`
            fields = {key for row in rows for key in row.reads}
            context = THROUGH_CONTEXT.get(stage.name, set())
            where = f"{recipe} {stage.name}"
            assert all(_inside(key, set(stage.sections)) for key in fields), where  # every field's keys are in the print
            assert set(stage.sections) <= fields | context, where  # and the print holds nothing else
            assert set(stage.ignores) == {key for row in rows for key in row.ignores}, where
            assert set(stage.at_default) == {key for row in rows for key in row.at_default}, where
            for row in rows:
                assert row.reads or row.field.metadata["why"], f"{where}: {row.field.name} holds no key and says not why"


def test_each_declaration_is_true_to_the_value_in_its_field(tmp_path: Path) -> None:
    """A field holding a part of the recipe holds exactly the part its keys name (`config` of stage 2
    is the recipe's stage2, not stage1), so a key declared on the wrong field cannot pass; and a
    field holding a settings object declares all of it (less what it ignores or hashes at its
    default), so a stage cannot read a part of it that its print does not cover."""
    checked = 0
    for recipe, loaded, table in _tables(tmp_path):
        tree = loaded.recipe.model_dump(mode="json")
        for stage in table:
            slice_ = stage.run.slice
            for row in declared(slice_):
                keys, value = row.reads, getattr(slice_, row.field.name)
                if not keys or (type(slice_).__name__, row.field.name) in DERIVED:
                    continue
                where = f"{recipe} {stage.name} {type(slice_).__name__}.{row.field.name}"
                if isinstance(value, BaseModel):
                    top = keys[0].split(".")[0]
                    assert all(key.split(".")[0] == top for key in keys), where
                    held = {top: value.model_dump(mode="json")}
                    for key in keys:
                        assert _pick(held, key.split(".")) == _pick(tree, key.split(".")), f"{where}: {key}"
                    left = _undeclared([top], held[top], set(keys), {*row.ignores, *row.at_default})
                    assert not left, f"{where}: holds {left}, which no key of its declares"
                else:
                    assert len(keys) == 1 and _pick(tree, keys[0].split(".")) == value, where
                for key in (*row.ignores, *row.at_default):  # a key left out lies inside the part the field holds
                    assert _inside(key, set(keys)), f"{where}: leaves out {key}"
                checked += 1
    assert checked > 5 * len(RECIPES)


def _undeclared(path: list[str], value: Any, keys: set[str], left_out: set[str]) -> list[str]:
    """The parts of `value` (at dotted `path`) that no key in `keys` covers and none in `left_out`
    leaves out; a part that holds a declared key is looked into (each list item alike)."""
    dotted = ".".join(path)
    if _inside(dotted, keys | left_out):
        return []
    if not any(_inside(key, {dotted}) for key in keys):
        return [dotted]
    if isinstance(value, dict):
        return [part for name, inner in value.items() for part in _undeclared([*path, name], inner, keys, left_out)]
    if isinstance(value, list):
        return list(dict.fromkeys(part for item in value for part in _undeclared(path, item, keys, left_out)))
    return [dotted]


def test_the_check_of_a_settings_field_finds_what_it_holds_and_no_key_declares() -> None:
    held = {"kind": "bpe", "vocab_size": 8, "min_vocab_fraction": 0.5}
    assert _undeclared(["tokenizer"], held, {"tokenizer.kind"}, {"tokenizer.min_vocab_fraction"}) == ["tokenizer.vocab_size"]
    assert _undeclared(["tokenizer"], held, {"tokenizer"}, set()) == []
    data = {"sources": [{"name": "a", "weight": 1}, {"name": "b", "weight": 2}], "replay": None}
    assert _undeclared(["data"], data, {"data.sources[].name", "data.replay"}, set()) == ["data.sources.weight"]


def test_an_ignored_key_changes_no_print_and_a_declared_one_does(tmp_path: Path) -> None:
    def prints(*sets: str) -> dict[str, str]:
        loaded = load_recipe(REPO / "recipes/tiny_norwegian_warm.yaml", [f"run_root={tmp_path}", *sets])
        return fingerprints(loaded, stage_table(loaded.recipe), base_model="")

    before = prints()
    assert prints("tokenizer.min_vocab_fraction=0.5") == before
    assert prints("stage2.log_every=3") == before
    assert prints("engine.peak_tflops=300") == before  # the MFU column's peak: hashed at its default
    assert prints("cluster.hardware=a100") == before  # the report's estimate: read from plan.json
    moved = prints("stage2.seq_len=96")
    assert [name for name in before if moved[name] != before[name]] == ["stage2", "evaluate", "export"]


def test_a_slice_field_must_declare_what_it_holds() -> None:
    @dataclasses.dataclass(frozen=True)
    class Undeclared:
        config: int

    with pytest.raises(TypeError, match="Undeclared.config: not declared"):
        recipe_keys(Undeclared(1))
    with pytest.raises(TypeError, match="says why"):
        reads()


def test_the_print_hashes_the_files_a_stage_declares_whatever_its_name(tmp_path: Path) -> None:
    """No stage name in `run.fingerprint`: a stage it has never heard of gets its files hashed."""
    loaded = load_recipe(REPO / "recipes/tiny_english_source.yaml", [f"run_root={tmp_path}"])
    suite = tmp_path / "suite.jsonl"
    suite.write_text("one\n")
    stages = [Stage("anything", (), lambda ctx: {}, files=lambda base: OutsideFiles((suite,))),
              Stage("after", (), lambda ctx: {})]
    before = fingerprints(loaded, stages, base_model="")
    suite.write_text("two\n")
    after = fingerprints(loaded, stages, base_model="")
    assert after["anything"] != before["anything"] and after["after"] != before["after"]
    missing = Stage("anything", (), lambda ctx: {}, files=lambda base: OutsideFiles(missing="base_model"))
    nothing = Stage("anything", (), lambda ctx: {}, files=lambda base: OutsideFiles())
    assert fingerprints(loaded, [missing], base_model="") != fingerprints(loaded, [nothing], base_model="")
