"""A tokenizer that stopped short of `tokenizer.vocab_size` is shown wherever the run is read:
`langadapt plan` (which then sizes the model with the tokens made), the evaluation report and the
model card (the console warning is tested in test_tokenizer_train.py)."""

from __future__ import annotations

import json
from pathlib import Path

from langadapt.evaluation.render import build_blocks
from langadapt.export.card import Exported, origin_text
from langadapt.export.provenance import RunFacts
from langadapt.planning.recipe_plan import plan_recipe
from langadapt.planning.render import render_plan
from langadapt.recipe import load_recipe
from langadapt.run.layout import RunLayout
from langadapt.tokenizer.summary import vocabulary_shortfall

REPO = Path(__file__).resolve().parents[2]
SHORT = {"kind": "inherit", "vocab_size": 13020, "vocab_size_requested": 32768}


def write_summary(run_dir: Path, stage: str, summary: dict) -> None:
    manifest = RunLayout(run_dir).manifest(stage)
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"stage": stage, "summary": summary}))


def test_shortfall_sentence() -> None:
    assert vocabulary_shortfall({"vocab_size": 32768, "vocab_size_requested": 32768}) is None
    assert vocabulary_shortfall({"vocab_size": 50000, "vocab_size_requested": 32768}) is None  # keep_base
    assert vocabulary_shortfall({}) is None
    text = vocabulary_shortfall(SHORT)
    assert text is not None and "13,020 tokens, 40% of the 32,768 asked for (tokenizer.vocab_size)" in text


def test_plan_sizes_the_model_with_the_tokens_made(tmp_path: Path) -> None:
    recipe = load_recipe(REPO / "recipes/norwegian_warm.yaml", [f"run_root={tmp_path}"]).recipe
    before = plan_recipe(recipe)
    assert before["model"]["vocab"] == 32768 and "notes" not in before
    write_summary(recipe.run_dir, "tokenizer", SHORT)
    after = plan_recipe(recipe)
    assert after["model"]["vocab"] == 13020
    assert after["model"]["embedding_params"] < before["model"]["embedding_params"]
    assert "warning: tokenizer stage: the new tokenizer has 13,020 tokens" in render_plan(after)


def test_report_and_card_say_it(tmp_path: Path) -> None:
    results = {"models": {"adapted": {}}, "tokenizers": {"shortfall": vocabulary_shortfall(SHORT)}}
    blocks = build_blocks(results, "t", set())
    assert ("p", f"Note: {vocabulary_shortfall(SHORT)}.") in blocks
    write_summary(tmp_path, "tokenizer", SHORT)
    write_summary(tmp_path, "embeddings", {"method": "mean"})
    facts = RunFacts(init="warm", base_hub_id=None, base_label="base", target_languages=("nb",), sources=())
    text = origin_text(RunLayout(tmp_path), facts, Exported("adapted", (), {}))
    assert "13020-token tokenizer" in text and "40% of the 32,768 asked for" in text
