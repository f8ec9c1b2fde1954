"""The report's training section shows every trained model: the run's stages and its cold twin on a
tokens axis and a FLOPs axis, and a table of each stage's settings, speed and wall time, all read
from what the stages wrote (metrics.jsonl, manifests, the resolved recipe) through RunLayout."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from langadapt.evaluation.plots import loss_curves, plot_validation
from langadapt.evaluation.report import write_report
from langadapt.evaluation.training_report import (
    settings_rows,
    token_axis,
    trained_runs,
    training_rate,
    validation_points,
)
from langadapt.run.completion import write_manifest
from langadapt.run.layout import RunLayout

CONFIG = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 4, "intermediate_size": 128, "vocab_size": 512, "tie_word_embeddings": False}
TOKENS_PER_STEP = 8 * 32


def fake_run(root: Path, stages: dict[str, tuple[str, int]], lr: float = 1e-3) -> RunLayout:
    """A finished run: per stage (trainable, steps) a metrics.jsonl logged every 10 steps, a model
    config, a manifest with its summary and wall time, and the resolved recipe's stage slices."""
    layout = RunLayout(root)
    root.mkdir(parents=True)
    recipe = {stage: {"optimizer": {"lr": lr}, "schedule": {"kind": "cosine", "warmup_steps": 5, "min_lr_ratio": 0.1}}
              for stage in stages}
    layout.resolved_recipe.write_text(yaml.safe_dump(recipe))
    for stage, (trainable, steps) in stages.items():
        paths = layout.trained(stage)
        paths.model.mkdir(parents=True)
        (paths.model / "config.json").write_text(json.dumps(CONFIG))
        rows = [{"step": s, "loss": 6.0 - s / 100, "lr": lr, "tokens": s * TOKENS_PER_STEP,
                 "tokens_per_second": 100.0 if s == 10 else 50.0} for s in range(10, steps + 1, 10)]
        rows += [{"step": s, "valid": {"nb": {"bits_per_byte": 3.0 - s / 100}}} for s in range(20, steps + 1, 20)]
        paths.metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
        settings = {"trainable": trainable, "seq_len": 32}
        write_manifest(paths.root, {"summary": {"steps": steps, "tokens": steps * TOKENS_PER_STEP, "global_batch": 8,
                                                "engine": "torch", "precision": "bf16", "world_size": 1,
                                                "settings": settings}, "wall_seconds": 65.0})
    return layout


def runs_of(tmp_path: Path) -> tuple[RunLayout, RunLayout, list]:
    warm = fake_run(tmp_path / "demo", {"stage1": ("embeddings", 20), "stage2": ("all", 40)})
    cold = fake_run(tmp_path / "demo_cold", {"stage2": ("all", 60)})
    models = {"base": tmp_path / "elsewhere", "init": warm.embeddings.model, "init_random": lambda: None,
              "stage1": warm.stage1.model, "adapted": warm.stage2.model, "cold": cold.stage2.model}
    return warm, cold, trained_runs(models)


def test_every_trained_model_is_found_through_its_run(tmp_path: Path) -> None:
    warm, _, runs = runs_of(tmp_path)
    assert [(run.name, [r.stage for r in run.stages]) for run in runs] == [("adapted", ["stage1", "stage2"]),
                                                                          ("cold", ["stage2"])]
    assert runs[0].metrics == {"stage1": warm.stage1.metrics, "stage2": warm.stage2.metrics}
    frozen, full = runs[0].stages[0].flops_per_token, runs[0].stages[1].flops_per_token
    assert 0.5 < frozen / full < 1.0  # a frozen body skips the body's weight gradients


def test_curves_continue_across_a_runs_stages_and_the_twin_starts_at_zero(tmp_path: Path) -> None:
    _, _, runs = runs_of(tmp_path)
    by_label = {label: (x, solid) for label, x, _, _, solid in loss_curves(runs, per_token=False)}
    assert by_label["adapted: stage1"] == ([2560, 5120], True)
    assert by_label["adapted: stage2"][0] == [5120 + 2560 * k for k in range(1, 5)]  # after stage 1's tokens
    assert by_label["cold: stage2"] == ([2560.0 * k for k in range(1, 7)], False)  # its own run: from 0, dashed
    flops = {label: x for label, x, *_ in loss_curves(runs, per_token=True)}
    stage1, stage2 = runs[0].stages
    assert flops["adapted: stage2"][0] == 5120 * stage1.flops_per_token + 2560 * stage2.flops_per_token


def test_the_stage_table_reads_recipe_manifest_and_metrics(tmp_path: Path) -> None:
    _, _, runs = runs_of(tmp_path)
    # windows of 2,560 tokens: the first at 100 tok/s (25.6 s), three at 50 (153.6 s): 10,240 / 179.2 s
    assert training_rate(runs[0].stages[1]) == 10240 / (2560 / 100 + 3 * 2560 / 50)
    header, rows = settings_rows(runs)
    assert header == ["", "adapted: stage1", "adapted: stage2", "cold: stage2"]
    table = {row[0]: row[1:] for row in rows}
    assert table["trains"] == ["embeddings + head", "all", "all"]
    assert table["learning rate"] == ["0.001"] * 3
    assert table["schedule"][0] == "cosine to 0.1x, 5 warm-up steps"
    assert table["global batch"][0] == "8 x 32 tokens" and table["steps"] == ["20", "40", "60"]
    assert table["tokens/s (training steps)"][1] == "57" and table["wall time (whole stage)"][0] == "0:01:05"


def test_the_report_draws_and_tabulates_every_trained_model(tmp_path: Path) -> None:
    _, _, runs = runs_of(tmp_path)
    results = {"models": {"base": {"nb": {"bits_per_byte": 2.0}}, "adapted": {"nb": {"bits_per_byte": 1.2}},
                          "cold": {"nb": {"bits_per_byte": 1.4}}},
               "reference": "base", "meta": {},
               "deltas": {"adapted": {"nb": {"bits_per_byte": -0.8, "relative": -0.4}},
                          "cold": {"nb": {"bits_per_byte": -0.6, "relative": -0.3}}}}
    paths = write_report(results, tmp_path / "report", runs)
    markdown = paths["markdown"].read_text()
    assert "|  | adapted: stage1 | adapted: stage2 | cold: stage2 |" in markdown
    assert "(plots/training.png)" in markdown and "(plots/training_flops.png)" in markdown
    assert json.loads(paths["results"].read_text())["training"]["stages"][0][3] == "cold: stage2"
    assert write_report(results, tmp_path / "bare")["markdown"].read_text().count("## Training") == 0


def test_a_run_is_found_by_its_layout_without_its_recipe_file(tmp_path: Path) -> None:
    warm = fake_run(tmp_path / "demo", {"stage2": ("all", 20)})
    warm.resolved_recipe.unlink()  # a run folder made by hand (or copied without its recipe)
    [run] = trained_runs({"adapted": warm.stage2.model, "other": tmp_path / "not_a_run" / "model"})
    assert run.name == "adapted" and run.stages[0].recipe == {} and run.stages[0].summary["steps"] == 20


def test_held_out_points_sit_on_the_tokens_axis_of_their_run(tmp_path: Path) -> None:
    _, _, runs = runs_of(tmp_path)
    axis = token_axis(runs[0].metrics)
    points = validation_points(runs[0].metrics)
    # stage 1 validated at step 20 (5,120 tokens); stage 2's steps 20 and 40 come after stage 1's 20 steps
    assert [(p["global_step"], axis[p["global_step"]]) for p in points] == [(20, 5120), (40, 10240), (60, 15360)]
    assert token_axis(runs[1].metrics)[60] == 15360  # the twin: its own run, from 0
    assert plot_validation(runs, tmp_path / "validation.png").stat().st_size > 10_000
