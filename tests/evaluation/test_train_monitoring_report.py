"""The evaluation report's training section: the held-out curve during training (both stages on
one axis, where it turned up), and measured energy per step next to the plan's estimate."""

from __future__ import annotations

import json
from pathlib import Path

from langadapt.evaluation.report import write_report
from langadapt.evaluation.training_report import (
    StageRecord,
    TrainedRun,
    energy_rows,
    epoch_marks,
    validation_points,
    validation_verdicts,
)


def write_metrics(path: Path, steps: list[int], nb: list[float], en: list[float], epochs: list[float],
                  joules: float | None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for step, nb_bpb, en_bpb, ep in zip(steps, nb, en, epochs):
        lines.append({"step": step, "loss": 3.0, "lr": 1e-3, "tokens_per_second": 800.0,
                      "tokens_per_second_per_device": 200.0, "joules_per_step": joules,
                      "epochs_by_source": {"nb.src": ep, "en.src": ep / 4}})
        lines.append({"step": step, "valid": {"nb": {"loss": 2 * nb_bpb, "bits_per_byte": nb_bpb, "tokens": 64},
                                              "en": {"loss": 2 * en_bpb, "bits_per_byte": en_bpb, "tokens": 64}},
                      "valid_seconds": 0.1})
    path.write_text("".join(json.dumps(row) + "\n" for row in lines))
    return path


def stages(tmp_path: Path) -> dict[str, Path]:
    """Stage 1 improves both; in stage 2 nb bottoms out at step 30 (2.4 epochs) and rises after."""
    return {
        "stage1": write_metrics(tmp_path / "stage1.jsonl", [10, 20], [3.0, 2.5], [1.50, 1.52], [0.2, 0.4], None),
        "stage2": write_metrics(tmp_path / "stage2.jsonl", [10, 20, 30, 40, 50], [2.2, 2.0, 1.9, 1.95, 2.05],
                                [1.5, 1.48, 1.47, 1.47, 1.469], [0.8, 1.6, 2.4, 3.2, 4.0], 12.5),
    }


def test_points_share_one_step_axis_and_the_verdict_finds_where_nb_turned_up(tmp_path: Path) -> None:
    points = validation_points(stages(tmp_path))
    assert [p["global_step"] for p in points] == [10, 20, 30, 40, 50, 60, 70]  # stage 2 after stage 1's 20
    assert {p["stage"]: p["offset"] for p in points} == {"stage1": 0, "stage2": 20}
    nb, en = validation_verdicts(points)
    assert nb.startswith("nb: held-out bpb was lowest at step 50 (stage2 step 30, nb.src at 2.4 epochs of stage2): 1.9000")
    assert "rose to 2.0500 (+0.1500) by step 70" in nb and " hurt " in nb
    assert en.startswith("en: held-out bpb 1.4690 at step 70") and "did not hurt" in en
    assert epoch_marks(stages(tmp_path)) == [(40, "nb.src", 2), (50, "nb.src", 3), (60, "nb.src", 4),
                                             (70, "nb.src", 5)]


def test_energy_rows_put_measured_joules_of_all_devices_beside_the_plan(tmp_path: Path) -> None:
    planned = {"joules_per_step": {"stage1": 40.0, "stage2": 100.0}, "note": "plan: 8 x H100"}
    rows = energy_rows(stages(tmp_path), planned)
    # 12.5 J per step on the logging device x 4 devices (800 tok/s over 200 per device) = 50 J
    assert rows == [["stage1", "not measured", "40", "n/a"], ["stage2", "50", "100", "0.50"]]
    assert energy_rows(stages(tmp_path), None) == [["stage2", "50", "n/a", "n/a"]]


def test_report_shows_the_validation_curve_its_verdicts_and_the_energy_table(tmp_path: Path) -> None:
    results = {"models": {"base": {"nb": {"bits_per_byte": 2.0}}, "adapted": {"nb": {"bits_per_byte": 1.2}}},
               "reference": "base", "deltas": {"adapted": {"nb": {"bits_per_byte": -0.8, "relative": -0.4}}}, "meta": {}}
    planned = {"joules_per_step": {"stage2": 100.0},
               "note": "plan: 8 x H100 SXM at 700 W (TDP) and 40% MFU"}
    run = TrainedRun("adapted", tuple(StageRecord(stage, path) for stage, path in stages(tmp_path).items()))
    paths = write_report(results, tmp_path / "report", [run], planned_energy=planned)
    assert paths["validation"].stat().st_size > 10_000  # a PNG with two curves
    markdown = paths["markdown"].read_text()
    assert "![held-out bits per byte per language during training](plots/validation.png)" in markdown
    assert "- nb: held-out bpb was lowest at step 50" in markdown
    assert "| stage2 | 50 | 100 | 0.50 |" in markdown and "plan: 8 x H100 SXM" in markdown
    html = paths["html"].read_text()
    assert 'alt="held-out bits per byte per language during training"' in html
    saved = json.loads(paths["results"].read_text())
    assert saved["training"]["energy"] == [["stage2", "50", "100", "0.50"]]  # stage 1: nothing to show
