"""A vocabulary that stopped short of vocab_size reaches the run's results.json and report (issue 32):
it was said on the console, in `plan` and in the card, but not where the numbers are read."""

from __future__ import annotations

import json
from pathlib import Path

from langadapt.evaluation.render import render_markdown
from langadapt.evaluation.stage import add_tokenizer_facts
from langadapt.run.layout import RunLayout


def _tokenizer_stage(root: Path, reached: int, asked: int) -> RunLayout:
    layout = RunLayout(root)
    layout.tokenizer.root.mkdir(parents=True)
    summary = {"kind": "inherit", "vocab_size": reached, "vocab_size_requested": asked}
    layout.manifest("tokenizer").write_text(json.dumps({"summary": summary}), "utf-8")
    return layout


def test_a_shortfall_is_in_the_results_and_the_report(tmp_path: Path) -> None:
    results: dict = {"models": {}, "deltas": {}, "tasks": {}, "reference": "base", "notes": []}
    add_tokenizer_facts(results, _tokenizer_stage(tmp_path / "short", 13020, 32768))
    shortfall = results["tokenizers"]["shortfall"]
    assert "13,020 tokens, 40% of the 32,768 asked for" in shortfall
    assert f"Note: {shortfall}." in render_markdown(results, {}, tmp_path, "report")


def test_a_full_vocabulary_adds_no_note(tmp_path: Path) -> None:
    results: dict = {}
    add_tokenizer_facts(results, _tokenizer_stage(tmp_path / "full", 8192, 8192))
    assert results["tokenizers"] == {"kind": "inherit"} and results["tokens_per_byte"] == {}
