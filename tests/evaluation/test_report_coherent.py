"""Any evaluation's report is coherent: sections only with content, no notes pointer without notes,
ratios only where they mean something and within bounds, and styles (gain green, loss red) that
follow the numbers, not the wording."""

from __future__ import annotations

import json
import re
from pathlib import Path

from langadapt.evaluation.report import write_report
from langadapt.evaluation.training_report import StageRecord, TrainedRun

MODEL = "tiny_norwegian_warm/export"


def lm_eval_only() -> dict:
    """What `langadapt eval EXPORT --suite eval/lm_eval_offline.yaml` returns: one model, tasks, no held-out text."""
    return {"models": {MODEL: {}}, "reference": MODEL, "deltas": {}, "task_deltas": {}, "notes": [], "langs": {},
            "tasks": {"lm_eval_offline/minimal_pairs": {"kind": "lm_eval", MODEL: {
                "nb_minimal_pairs_mc": {"sample_len": 24, "acc": 0.708}}}},
            "meta": {"window": 512, "stride": 512, "seconds": 5.0}}


def test_an_lm_eval_only_report_has_no_empty_section_and_no_pointer_to_missing_notes(tmp_path: Path) -> None:
    markdown = write_report(lm_eval_only(), tmp_path)["markdown"].read_text()
    assert "What changed" not in markdown and "Held-out bits per byte" not in markdown
    assert "notes" not in markdown.lower() and "Reference" not in markdown and "Window" not in markdown
    assert "| lm_eval_offline/minimal_pairs | nb_minimal_pairs_mc/acc ↑ | 0.708 |" in markdown  # no "()"
    headings = [line for line in markdown.splitlines() if line.startswith("#")]
    for heading, following in zip(headings, [*headings[1:], None]):  # every heading has a body
        body = markdown.split(heading, 1)[1].split(following, 1)[0] if following else markdown.split(heading, 1)[1]
        assert body.strip(), heading


def test_perplexities_are_compared_as_bounded_ratios_scores_as_differences(tmp_path: Path) -> None:
    tasks = {"wiki/rolling": {"kind": "lm_eval", "lang": "nb",
                              "base": {"t": {"word_perplexity": 7658196480.0, "byte_perplexity": 4.0, "acc": 0.375}},
                              "adapted": {"t": {"word_perplexity": 11.5, "byte_perplexity": 2.0, "acc": 0.708}}}}
    results = {"models": {"base": {}, "adapted": {}}, "reference": "base", "deltas": {}, "notes": [], "meta": {},
               "tasks": tasks,
               "task_deltas": {"wiki/rolling": {"adapted": {"t/word_perplexity": 11.5 - 7658196480.0,
                                                            "t/byte_perplexity": -2.0, "t/acc": 0.333}}}}
    markdown = write_report(results, tmp_path)["markdown"].read_text()
    rows = {line.split(" | ")[1]: line for line in markdown.splitlines() if line.startswith("| wiki/rolling")}
    assert rows["t/word_perplexity ↓"].endswith("| 7.658e+09 | 11.500 | – |")  # a ratio of 1.5e-9: not printed
    assert rows["t/byte_perplexity ↓"].endswith("| x0.5 |") and rows["t/acc ↑"].endswith("| +0.333 |")
    assert "7658196468" not in markdown and "Perplexities are compared as a ratio" in markdown


def test_relative_change_is_left_out_where_the_reference_is_zero(tmp_path: Path) -> None:
    results = {"models": {"base": {"nb": {"bits_per_byte": 0.0}}, "adapted": {"nb": {"bits_per_byte": 1.0}}},
               "reference": "base", "meta": {}, "notes": [],
               "deltas": {"adapted": {"nb": {"bits_per_byte": 1.0, "relative": float("inf")}}}}
    markdown = write_report(results, tmp_path)["markdown"].read_text()
    assert "| nb |  | 0.000 | 1.000 | +1.000 |" in markdown and "inf" not in markdown
    assert "- nb: adapted forgot 1.000 bits/byte vs base\n" in markdown


def style(html: str, start: str) -> str:
    """The class of the one list item that starts with `start`."""
    [css] = [css for css, text in re.findall(r'<li class="([^"]*)">([^<]*)</li>', html) if text.startswith(start)]
    return css


def test_styles_follow_the_numbers(tmp_path: Path) -> None:
    rows = [{"step": 10, "loss": 3.0, "tokens": 100}, {"step": 20, "loss": 2.9, "tokens": 200}]
    valid = [{"step": 10, "valid": {"nb": {"bits_per_byte": 2.0}, "en": {"bits_per_byte": 1.0}}},
             {"step": 20, "valid": {"nb": {"bits_per_byte": 1.9}, "en": {"bits_per_byte": 1.1}}}]
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows + valid))
    results = {"models": {"base": {"nb": {"bits_per_byte": 2.0}, "en": {"bits_per_byte": 1.0},
                                   "fi": {"bits_per_byte": 3.0}},
                          "adapted": {"nb": {"bits_per_byte": 1.5}, "en": {"bits_per_byte": 1.2},
                                      "fi": {"bits_per_byte": 3.0}}},
               "reference": "base", "meta": {}, "notes": [],
               "deltas": {"adapted": {"nb": {"bits_per_byte": -0.5, "relative": -0.25},
                                      "en": {"bits_per_byte": 0.2, "relative": 0.2},
                                      "fi": {"bits_per_byte": 0.0, "relative": 0.0}}}}
    html = write_report(results, tmp_path / "report", [TrainedRun("adapted", (StageRecord("stage2", metrics),))])
    page = html["html"].read_text()
    assert style(page, "nb: adapted gained 0.500") == "gain" and style(page, "en: adapted forgot 0.200") == "loss"
    assert style(page, "fi: adapted unchanged 0.000") == ""
    assert style(page, "nb: held-out bpb 1.9000 at step 20") == ""  # "did not hurt yet" is no loss
    assert style(page, "en: held-out bpb was lowest at step 10") == "loss"  # it rose: training hurt en
