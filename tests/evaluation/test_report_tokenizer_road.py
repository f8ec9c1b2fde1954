"""The report names the run's tokenizer road near its top, and says which run directory's
held-out split was scored (issue 38): `langadapt eval` takes that text from the model's run, the
run an export names or the first --compare run, and the results used not to say which."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from langadapt.evaluation.preparation import RUN_DATA
from langadapt.evaluation.render import build_blocks
from langadapt.evaluation.stage import add_tokenizer_facts, name_held_out_run
from langadapt.run.layout import RunLayout


def _run(root: Path, kind: str) -> RunLayout:
    layout = RunLayout(root)
    layout.tokenizer.root.mkdir(parents=True)
    summary = {"kind": kind, "vocab_size": 8192, "vocab_size_requested": 8192}
    layout.manifest("tokenizer").write_text(json.dumps({"summary": summary}), "utf-8")
    return layout


def _results() -> dict:
    return {"models": {"base": {}, "adapted": {}}, "reference": "base", "deltas": {}, "tasks": {}, "notes": [],
            "langs": {"nb": {"documents": 3, "bytes": 900, "source": RUN_DATA},
                      "sv": {"documents": 1, "bytes": 300, "source": "sv.txt"}}}


def _paragraphs(results: dict) -> list[str]:
    return [block[1] for block in build_blocks(results, "t", set()) if block[0] == "p"]


@pytest.mark.parametrize(("kind", "says"), [
    ("keep_base", "the base model's own tokenizer, unchanged"),
    ("extend", "the base tokenizer with the target language's tokens appended"),
    ("inherit", "a new tokenizer trained on the run's data"),
    ("unigram", "a new tokenizer trained on the run's data"),
])
def test_the_road_is_named_right_after_the_models(tmp_path: Path, kind: str, says: str) -> None:
    results = _results()
    add_tokenizer_facts(results, _run(tmp_path / kind, kind))
    assert results["tokenizers"]["kind"] == kind
    paragraphs = _paragraphs(results)
    assert paragraphs[0].startswith("Models: base, adapted.")
    assert paragraphs[1].startswith(f"Tokenizer road: {kind}: {says}")


def test_the_recipe_names_the_road_when_the_tokenizer_stage_left_no_summary(tmp_path: Path) -> None:
    layout = RunLayout(tmp_path / "run")
    layout.root.mkdir()
    layout.resolved_recipe.write_text("tokenizer:\n  kind: extend\n", "utf-8")
    results = _results()
    add_tokenizer_facts(results, layout)
    assert results["tokenizers"]["kind"] == "extend"


def test_no_road_is_claimed_when_none_is_known() -> None:
    assert not any(p.startswith("Tokenizer road") for p in _paragraphs(_results()))


def test_the_run_whose_held_out_split_was_scored_is_in_results_and_report(tmp_path: Path) -> None:
    results = _results()
    name_held_out_run(results, tmp_path / "runs" / "other")
    assert results["held_out_run"] == str(tmp_path / "runs" / "other")
    assert any(p.endswith(f"Run data: the held-out (valid) split of {tmp_path / 'runs' / 'other'}.")
               for p in _paragraphs(results))


def test_no_run_is_named_when_every_text_was_given_as_a_file(tmp_path: Path) -> None:
    results = _results()
    del results["langs"]["nb"]
    name_held_out_run(results, tmp_path / "runs" / "other")
    assert "held_out_run" not in results
    name_held_out_run(_results(), None)  # no run at all: nothing to name, nothing raised
