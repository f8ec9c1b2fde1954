"""What a target token costs (issue 29 item 4): held-out tokens per UTF-8 byte, read from the tokenizer
stage's metrics.json, for the run's tokenizer and the base's, kept in results.json and shown under the
report's trade-off table."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from langadapt.evaluation.render import render_html, render_markdown
from langadapt.evaluation.report import write_report
from langadapt.evaluation.token_cost import cost_line, token_costs, tokens_per_byte
from langadapt.run.layout import RunLayout


def tokenizer_stage(root: Path, kind: str, per_tokenizer: dict[str, dict[str, float]]) -> RunLayout:
    """A run whose tokenizer stage recorded `kind` and, per tokenizer, bytes per token per language."""
    layout = RunLayout(root)
    layout.tokenizer.root.mkdir(parents=True)
    metrics = {"languages": ["en", "nb"], "tokenizers": {
        name: {lang: {"fertility": 1.5, "bytes_per_token": b} for lang, b in per.items()}
        for name, per in per_tokenizer.items()}}
    (layout.tokenizer.root / "metrics.json").write_text(json.dumps(metrics))
    layout.manifest("tokenizer").write_text(json.dumps({"summary": {"kind": kind}}))
    return layout


BOTH = {"base": {"nb": 3.0, "en": 4.5}, "new": {"nb": 4.0, "en": 3.6}}
"""Bytes per token of a replaced vocabulary: nb cheaper than with the base tokenizer, en dearer."""


def test_tokens_per_byte_is_the_inverse_of_bytes_per_token() -> None:
    assert tokens_per_byte(4.0) == 0.25 and tokens_per_byte(5) == 0.2
    assert [tokens_per_byte(v) for v in (None, 0.0, -1.0, math.nan, math.inf, True, "4")] == [None] * 7


def test_a_new_tokenizer_and_the_base_side_by_side(tmp_path: Path) -> None:
    layout = tokenizer_stage(tmp_path / "run", "inherit", BOTH)
    costs = token_costs(layout)
    assert costs["run"] == {"en": pytest.approx(1 / 3.6), "nb": 0.25}
    assert costs["base"] == {"en": pytest.approx(1 / 4.5), "nb": pytest.approx(1 / 3)}


def test_keep_base_is_its_own_reference_and_scratch_has_none(tmp_path: Path) -> None:
    # keep_base: the stage measures the one tokenizer once, as `new`; it is the base tokenizer
    kept = token_costs(tokenizer_stage(tmp_path / "keep", "keep_base", {"new": {"nb": 3.0}}))
    assert kept == {"run": {"nb": pytest.approx(1 / 3)}, "base": {"nb": pytest.approx(1 / 3)}}
    # a scratch run has no base tokenizer: only the run's side
    assert token_costs(tokenizer_stage(tmp_path / "scratch", "inherit", {"new": {"nb": 4.0}})) == {"run": {"nb": 0.25}}
    # an empty held-out language (NaN bytes per token) is left out, not shown as 0 or inf
    assert token_costs(tokenizer_stage(tmp_path / "nan", "inherit", {"new": {"nb": 4.0, "en": math.nan}})) == {
        "run": {"nb": 0.25}}
    assert token_costs(RunLayout(tmp_path / "no-tokenizer-stage")) == {}


def results(costs: dict) -> dict:
    """A run's results: nb the target (base 5.0 -> adapted 2.0 bits per byte), en forgotten a little."""
    models = {"base": {"nb": {"bits_per_byte": 5.0}, "en": {"bits_per_byte": 2.0}},
              "adapted": {"nb": {"bits_per_byte": 2.0}, "en": {"bits_per_byte": 2.1}}}
    return {"models": models, "reference": "base", "target_langs": ["nb"], "deltas": {},
            "suites": {"bpb": {"langs": ["nb", "en"]}}, "tokens_per_byte": costs}


def test_results_json_and_the_report_show_the_targets_tokens_per_byte(tmp_path: Path) -> None:
    layout = tokenizer_stage(tmp_path / "run", "inherit", BOTH)
    paths = write_report(results(token_costs(layout)), layout.evaluate)
    saved = json.loads(paths["results"].read_text())
    assert saved["tokens_per_byte"]["run"]["nb"] == 0.25
    assert saved["tokens_per_byte"]["base"]["nb"] == pytest.approx(0.3333333)
    markdown = paths["markdown"].read_text()
    line = ("Held-out tokens per UTF-8 byte of the target with the run's tokenizer (what a token costs at "
            "inference: lower is cheaper): nb 0.250 (base tokenizer 0.333).")
    # beside the answer: after the trade-off table, before the per-language bits-per-byte table
    assert markdown.index("| target gain | nb | -60.0% |") < markdown.index(line) < markdown.index("## Held-out bits per byte")
    assert f"<p>{line.replace(chr(39), '&#x27;')}</p>" in paths["html"].read_text()


def test_several_targets_and_unknown_costs(tmp_path: Path) -> None:
    tree = {**results({"run": {"nb": 0.25, "nn": 0.3}, "base": {"nb": 1 / 3}}), "target_langs": ["nb", "nn"]}
    assert cost_line(tree).endswith(": nb 0.250 (base tokenizer 0.333), nn 0.300.")
    for unknown in ({}, {"run": {"en": 0.2}}):  # not measured, or not for the target
        tree = results(unknown)
        assert cost_line(tree) is None
        assert "tokens per UTF-8 byte" not in render_markdown(tree, {}, tmp_path, "t") + render_html(tree, {}, "t")
