"""The card says what ran: a source no training stage read is listed as evaluation only (not as
replay with 0 tokens), and the card's fertility is the figure the evaluation report prints."""

from __future__ import annotations

import json
from pathlib import Path

from langadapt.evaluation.report import write_report
from langadapt.export.card import EVALUATION_ONLY, Exported, build_card
from langadapt.export.provenance import RunFacts, SourceFacts
from langadapt.recipe.export import ExportConfig
from langadapt.run.layout import TRAINER_STATE, RunLayout

SOURCES = (SourceFacts("nb.src", "nb", "target", (), (), "by hash"), SourceFacts("en.src", "en", "replay", (), (), "by hash"),
           SourceFacts("nn.src", "nn", "replay", (), (), "by hash"))
FACTS = RunFacts(init="warm", base_hub_id=None, base_label="base", target_languages=("nb",), sources=SOURCES)


def metrics(fertility: float) -> dict:
    return {"languages": ["nb"], "tokenizers": {"new": {"nb": {"fertility": fertility, "bytes_per_token": 4.0}}}}


def card_of(layout: RunLayout) -> str:
    exported = Exported("adapted", ("stage2",), {"prompt": "Oslo"})
    return str(build_card(layout, FACTS, ExportConfig(), exported))


def run_with_training(tmp_path: Path) -> RunLayout:
    """stage 2 read nb and en (its last checkpoint's stream counts), never nn; the tokenizer stage
    measured nb's fertility on all held-out text (1.60)."""
    layout = RunLayout(tmp_path / "run")
    checkpoint = layout.stage2.checkpoints / "step_10"
    checkpoint.mkdir(parents=True)
    stream = {"seq_len": 4, "counts": {"nb.src": 30, "en.src": 10, "nn.src": 0}}
    (checkpoint / TRAINER_STATE).write_text(json.dumps({"stream": stream}))
    layout.tokenizer.root.mkdir(parents=True)
    (layout.tokenizer.root / "metrics.json").write_text(json.dumps(metrics(1.6033)))
    return layout


def table_row(card: str, source: str) -> list[str]:
    [line] = [line for line in card.splitlines() if line.startswith(f"| {source} |")]
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_a_source_no_stage_read_is_listed_as_evaluation_only(tmp_path: Path) -> None:
    card = card_of(run_with_training(tmp_path))
    assert table_row(card, "nn.src")[2:6] == [EVALUATION_ONLY, "0", "-", "-"]
    assert table_row(card, "en.src")[2] == "replay" and table_row(card, "en.src")[4] == "40"
    assert f"*{EVALUATION_ONLY}* contributed no training tokens" in card


def test_card_and_report_print_the_same_fertility(tmp_path: Path) -> None:
    layout = run_with_training(tmp_path)
    assert "| nb | new | 1.60 | 4.00 |" in card_of(layout)  # not evaluated: the tokenizer stage's figure
    results = {"models": {"adapted": {"nb": {"bits_per_byte": 1.2}}}, "reference": "adapted", "meta": {},
               "deltas": {}, "tokenizers": {"used_by": {"new": ["adapted"]}, "metrics": metrics(1.6231)}}
    report = write_report(results, layout.evaluate)["markdown"].read_text()
    assert "| nb | 1.62 | 4.00 |" in report
    assert "| nb | new | 1.62 | 4.00 |" in card_of(layout) and "1.60" not in card_of(layout)


def test_the_card_says_what_the_held_out_hash_is_taken_of() -> None:
    """The card said "chosen by document hash" when the demo holds out by page (`split_by: id`)."""
    from langadapt.recipe import load_recipe

    demo = Path(__file__).resolve().parents[2] / "recipes" / "tiny_norwegian_warm.yaml"
    by_page = RunFacts.from_recipe(load_recipe(demo).recipe).sources[0].held_out
    by_text = RunFacts.from_recipe(load_recipe(demo, ["data.split_by=text"]).recipe).sources[0].held_out
    assert "a hash of its page name" in by_page and "text" not in by_page
    assert "a hash of its text" in by_text
