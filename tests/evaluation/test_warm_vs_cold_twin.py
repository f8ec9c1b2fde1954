"""`evaluation.cold_baseline`: the pipeline trains a cold twin at equal compute, scores it as `cold`,
and keeps it like the demo's base model (a second run trains nothing).

A real pipeline on a tiny model: a 1-layer scratch Llama built by its own recipe is the base, the
warm run has 2 stage-1 and 3 stage-2 steps, the suite scores held-out bits per byte.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import yaml

from langadapt.evaluation.cold_twin import cold_twin_overrides, run_flops, step_flops
from langadapt.pipeline.runner import run_pipeline
from langadapt.planning.models import ModelDims, load_model_dims
from langadapt.recipe import load_recipe
from langadapt.run.layout import RunLayout

BASE = """\
name: base
run_root: {root}/runs
init: scratch
base_model:
  architecture: {{model_type: llama, hidden_size: 16, intermediate_size: 32, num_hidden_layers: 1,
                 num_attention_heads: 2, num_key_value_heads: 1, max_position_embeddings: 64}}
data:
  sources: [{{name: en, path: {root}/en.txt, lang: en}}]
  valid_fraction: 0.2
tokenizer: {{kind: byte_bpe, vocab_size: 300}}
stage2: {{steps: 2, micro_batch_size: 2, seq_len: 16}}
engine: {{kind: torch, precision: fp32}}
evaluation: {{suites: []}}
export: {{languages: [en]}}
"""

WARM = """\
name: warm
run_root: {root}/runs
init: warm
base_model: {{path: {root}/runs/base/export/model, build_recipe: {root}/base.yaml}}
data:
  sources: [{{name: nb, path: {root}/nb.txt, lang: nb}}]
  valid_fraction: 0.2
tokenizer: {{vocab_size: 300}}
engine: {{kind: torch, precision: fp32}}
stage1: {{steps: 2, micro_batch_size: 2, seq_len: 16}}
stage2: {{steps: 3}}
evaluation: {{suites: [{root}/suite.yaml], cold_baseline: true, random_baseline: false, window: 16}}
export: {{enabled: false}}
"""


DEMO = Path(__file__).resolve().parents[2] / "recipes" / "tiny_norwegian_warm.yaml"
DEMO_DIMS = ModelDims(name="demo", hidden=128, layers=4, heads=4, kv_heads=2, ffn=352, vocab=4096, tied=False)
"""The demo's model: 60 stage-1 and 200 stage-2 steps, both of 16 x 128 tokens."""
FROZEN_BODY = "[model.embed_tokens.weight, lm_head.weight]"


@pytest.mark.parametrize(("overrides", "twin_steps"), [
    ([], 249),  # stage 1 trains embeddings + head: 60 steps at 0.82 of a full step
    (["stage1.trainable=[all]"], 260),  # a full stage 1: 60 full steps on top of 200
    ([f"stage2.trainable={FROZEN_BODY}"], 260),  # the twin's stage 2 is frozen-body too: step for step
    (["stage1.trainable=[all]", f"stage2.trainable={FROZEN_BODY}"], 273),  # (60 + 200 x 0.82) / 0.82
])
def test_the_twins_steps_follow_what_each_stage_trains(overrides: list[str], twin_steps: int) -> None:
    """Which steps cost a frozen-body step (4N + 2N_head) is each stage's own `trainable`, not its
    name: the equal-compute steps move exactly as the FLOPs formula says."""
    warm = load_recipe(DEMO, overrides).recipe
    twin = load_recipe(DEMO, [*overrides, *cold_twin_overrides(warm, DEMO_DIMS)]).recipe
    assert twin.stage2.steps == twin_steps
    frozen = step_flops(DEMO_DIMS, "stage1", load_recipe(DEMO).recipe.stage1)
    full = step_flops(DEMO_DIMS, "stage2", load_recipe(DEMO).recipe.stage2)
    assert step_flops(DEMO_DIMS, "stage2", warm.stage2) == (frozen if "stage2" in " ".join(overrides) else full)


def _corpus(path: Path, words: list[str]) -> None:
    path.write_text("\n\n".join(" ".join(words[(i + j) % len(words)] for j in range(40)) for i in range(60)))


def test_cold_twin_is_trained_at_equal_compute_scored_and_kept(tmp_path: Path, monkeypatch, caplog) -> None:
    monkeypatch.chdir(tmp_path)
    _corpus(tmp_path / "en.txt", [f"word{i}" for i in range(80)] + ["the", "and", "of"])
    _corpus(tmp_path / "nb.txt", [f"ord{i}" for i in range(80)] + ["og", "i", "det"])
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(
        {"name": "mono", "tasks": [{"kind": "bpb", "name": "heldout_bpb", "langs": ["nb"]}]}))
    (tmp_path / "base.yaml").write_text(BASE.format(root=tmp_path))
    (tmp_path / "warm.yaml").write_text(WARM.format(root=tmp_path))
    warm = load_recipe(tmp_path / "warm.yaml")
    with caplog.at_level(logging.INFO, logger="langadapt"):
        run_pipeline(warm)

    # A graph of runs: the base's run before every stage, the twin's between stage 2 and evaluate,
    # each line labelled with the run it belongs to.
    stage_lines = [r.getMessage().split(" done")[0] for r in caplog.records
                   if r.name == "langadapt" and (" needs " in r.getMessage() or " done in " in r.getMessage())]
    runs = tmp_path / "runs"
    assert stage_lines == [
        f"every stage needs the base model: run base in {runs / 'base'}",
        *(f"[base] {name:<10}" for name in ("data", "tokenizer", "embeddings", "stage2", "evaluate", "export")),
        *(f"{name:<10}" for name in ("data", "tokenizer", "embeddings", "stage1", "stage2")),
        f"evaluate needs the cold twin: run warm_cold in {runs / 'warm_cold'}",
        *(f"[warm_cold] {name:<10}" for name in ("data", "tokenizer", "embeddings", "stage2", "evaluate")),
        "evaluate  ",
    ]

    twin_dir = tmp_path / "runs" / "warm_cold"
    twin = yaml.safe_load((twin_dir / "recipe.resolved.yaml").read_text())
    assert twin["init"] == "scratch" and twin["evaluation"]["suites"] == [] and not twin["export"]["enabled"]
    dims = load_model_dims(RunLayout(warm.recipe.run_dir).embeddings.model)
    full_step = step_flops(dims, "stage2", warm.recipe.stage2)
    assert twin["stage2"]["steps"] > warm.recipe.stage2.steps  # stage 1's FLOPs went to stage 2
    spent = run_flops(dims, load_recipe(tmp_path / "warm.yaml", ["init=scratch", f"stage2.steps={twin['stage2']['steps']}"]).recipe)
    assert abs(spent - run_flops(dims, warm.recipe)) <= full_step / 2
    assert (RunLayout(twin_dir).stage2.model / "config.json").is_file()

    results = json.loads(RunLayout(warm.recipe.run_dir).evaluation_results.read_text())
    assert list(results["models"]) == ["base", "init", "stage1", "adapted", "cold"]
    assert results["models"]["cold"]["nb"]["bits_per_byte"] > 0

    # Cached: evaluating again re-uses the twin (its stages are complete, nothing retrains).
    stamp = (RunLayout(twin_dir).stage2.model / "model.safetensors").stat().st_mtime_ns
    run_pipeline(warm, only="evaluate")
    assert (RunLayout(twin_dir).stage2.model / "model.safetensors").stat().st_mtime_ns == stamp
