"""A recipe problem is located by the key its error carries, not by parsing its message (review s19 R3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from langadapt.errors import LangadaptError
from langadapt.recipe.errors import Report

RECIPE = """name: keyed
engine:
  kind: torch
  zero_stage: 2
stage1:
  steps: 5
"""


@pytest.fixture()
def recipe(tmp_path: Path) -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text(RECIPE)
    return path


def test_an_error_with_a_key_is_located_whatever_its_message_says(recipe: Path) -> None:
    report = Report(recipe, {"inherited": [], "overridden": []}, {})
    with report.guard():
        raise LangadaptError("ZeRO needs DeepSpeed", key=("engine", "zero_stage"))
    assert report.lines() == [f"{recipe}:4: engine.zero_stage: ZeRO needs DeepSpeed"]


def test_a_keyed_error_set_by_a_flag_blames_the_flag_and_keeps_its_text(recipe: Path) -> None:
    report = Report(recipe, {"inherited": [], "overridden": []}, {"stage1.steps": "stage1.steps=5"})
    error = LangadaptError.at("stage1.steps", "too few")
    assert str(error) == "stage1.steps: too few" and error.key == ("stage1", "steps") and error.what == "too few"
    report.add_error(error)
    assert report.lines() == ["--set stage1.steps=5: stage1.steps: too few"]


def test_an_error_without_a_key_is_read_as_before(recipe: Path) -> None:
    report = Report(recipe, {"inherited": [], "overridden": []}, {})
    with report.guard():
        raise LangadaptError("engine.kind: one line written with its key")  # KEYED_LINE, the fallback
    with report.guard():
        raise LangadaptError("something without a key")
    assert report.lines() == [f"{recipe}:3: engine.kind: one line written with its key", "something without a key"]


def test_the_replay_refusal_is_relocated_by_its_key() -> None:
    from langadapt.recipe.replay import replay_mixture

    with pytest.raises(LangadaptError) as caught:
        replay_mixture({"nb": {"weight": 1.0}}, {"nb": "target"}, 0.2, key="stage2.replay")
    assert caught.value.key == ("stage2", "replay") and str(caught.value).startswith("stage2.replay: 0.2 of")
