"""`langadapt launch --sweep` and `langadapt sweep-report`, without Slurm (fast, CPU only).

The scripts of a 2x2 matrix (what each job asks for and runs), submit.sh run against a stand-in
sbatch (the dependency on the preparation job), the collector on synthetic metrics files (exact
efficiencies, failed and unfinished configurations listed), and every bad input as one line.
The same sweep runs on a real Slurm in test_launch_sweep_slurm.py.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from helpers.recipes import scratch_recipe

from langadapt import cli
from langadapt.run.layout import RunLayout
from langadapt.experiments.sweep import SweepPoint, collect, write_sweep

WARMUP = 3
"""Warm-up steps of the synthetic sweeps: the collector's median starts after them."""


@pytest.fixture
def recipe(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(scratch_recipe(tmp_path, "tiny", source="nb.jsonl"))
    return path


def _sbatch_options(text: str) -> dict[str, str]:
    return dict(line.removeprefix("#SBATCH --").partition("=")[::2]
                for line in text.splitlines() if line.startswith("#SBATCH --"))


def _step_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("step ")]


def _launch(*argv: str) -> int:
    return cli.main(["launch", *argv])


def test_a_2x2_matrix_writes_one_job_per_configuration(recipe: Path, tmp_path: Path) -> None:
    sweep = tmp_path / "sw"
    assert _launch(str(recipe), "--slurm", "--preset", "nvidia-8", "--sweep", "nodes=1,2", "gpus=4,8",
                   "--steps", "20", "--warmup-steps", "4", "--set", "seed=7", "--out", str(sweep)) == 0
    meta = json.loads((sweep / "sweep.json").read_text())
    assert [c["name"] for c in meta["configurations"]] == ["n1g4", "n1g8", "n2g4", "n2g8"]  # smallest world first
    assert (meta["steps"], meta["warmup_steps"]) == (20, 4)
    prepared = RunLayout(tmp_path / "runs" / "tiny")
    for config in meta["configurations"]:
        text = (sweep / config["script"]).read_text()
        assert subprocess.run(["bash", "-n", str(sweep / config["script"])], check=False).returncode == 0
        opts = _sbatch_options(text)
        assert (opts["nodes"], opts["ntasks-per-node"], opts["gpus-per-node"]) == (
            str(config["nodes"]), str(config["gpus_per_node"]), str(config["gpus_per_node"]))
        assert opts["time"] == "1:00:00" and opts["job-name"] == f"tiny-sweep-{config['name']}"
        assert opts["output"] == f"{sweep}/logs/%x-%j.out"
        [step] = _step_lines(text)  # one srun step: stage 2 only, in the configuration's own run
        assert step.startswith('step "srun" srun ') and f"--ntasks-per-node={config['gpus_per_node']}" in step
        run_name = f"tiny-sweep-{config['name']}"
        assert "--until stage2 --set seed=7 --set stage2.steps=20 --set stage2.log_every=1" in step
        assert f"--set run_root={sweep} --set name={run_name}" in step
        assert "stage2.checkpoint.every_steps=null" in step and "stage2.validation.every_steps=null" in step
        assert "stage2.checkpoint.at_end=false" in step
        assert config["run_dir"] == str(sweep / run_name)
        # the stages before stage 2 are the prepared run's, linked (dangling until it ran)
        layout = RunLayout(Path(config["run_dir"]))
        for stage in ("data", "tokenizer", "embeddings", "stage1"):
            assert layout.stage_dir(stage).is_symlink()
            assert os.readlink(layout.stage_dir(stage)) == str(prepared.stage_dir(stage))
        assert not layout.stage_dir("stage2").exists()
    prepare = (sweep / "prepare.sbatch").read_text()
    opts = _sbatch_options(prepare)
    assert (opts["nodes"], opts["ntasks-per-node"], opts["job-name"]) == ("1", "8", "tiny-sweep-prepare")
    steps = _step_lines(prepare)  # data..embeddings here, stage 1 under srun, no evaluation/export
    assert len(steps) == 2 and steps[0].endswith("--until embeddings --set seed=7 && \\")
    assert "srun" in steps[1] and steps[1].endswith("--until stage1 --set seed=7")
    assert "run_root=" not in prepare  # the recipe's own run is prepared, reusable by the real run


def test_submit_sh_makes_every_configuration_wait_for_the_preparation(recipe: Path, tmp_path: Path) -> None:
    sweep = tmp_path / "sw"
    assert _launch(str(recipe), "--slurm", "--preset", "nvidia-4", "--sweep", "gpus=2,4", "--out", str(sweep)) == 0
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(  # stand-in: records its arguments, answers job ids 100, 101, ...
        '#!/bin/bash\necho "$*" >> "$CALLS"\nn=$(wc -l < "$CALLS")\necho "$((99 + n));cluster"\n')
    (bin_dir / "sbatch").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CALLS": str(tmp_path / "calls")}
    done = subprocess.run(["bash", str(sweep / "submit.sh")], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["prepare: job 100", "n1g2: job 101", "n1g4: job 102"]
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls == ["--parsable prepare.sbatch",
                     "--parsable --dependency=afterok:100 --kill-on-invalid-dep=yes n1g2.sbatch",
                     "--parsable --dependency=afterok:100 --kill-on-invalid-dep=yes n1g4.sbatch"]


def _finish(run_dir: Path, world: int, tokens_per_second: list[float], complete: bool = True) -> None:
    """A stage-2 folder as training leaves it: metrics rows, the manifest's summary, the marker."""
    stage2 = RunLayout(run_dir).stage2
    stage2.root.mkdir(parents=True)
    rows = [{"step": i + 1, "loss": 5.0, "tokens_per_second": tps, "mfu": None}
            for i, tps in enumerate(tokens_per_second)]
    rows.insert(WARMUP + 1, {"step": WARMUP + 1, "valid": {"nb": {"loss": 5.0}}})  # not a throughput row
    lines = [json.dumps(r) for r in rows] + ['{"step": 99, "tokens_per']  # cut short by a kill
    stage2.metrics.write_text("\n".join(lines) + "\n")
    if complete:
        (stage2.root / "manifest.json").write_text(json.dumps({"summary": {"world_size": world}}))
        (stage2.root / "COMPLETE").write_text("done\n")


def _sweep(tmp_path: Path, recipe: Path, points: list[SweepPoint]) -> Path:
    return write_sweep(recipe, points, run_name="tiny", run_dir=tmp_path / "runs" / "tiny",
                       out_dir=tmp_path / "sw", steps=8, warmup_steps=WARMUP, preset="nvidia-8")


def test_the_collector_reports_medians_efficiencies_and_unfinished_ones(recipe: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture) -> None:
    points = [SweepPoint(1, 1), SweepPoint(1, 2), SweepPoint(2, 2), SweepPoint(1, 4), SweepPoint(2, 4)]
    sweep = _sweep(tmp_path, recipe, points)
    warm = [1.0, 50_000.0, 3.0]  # the 3 warm-up steps: never in the median
    _finish(sweep / "tiny-sweep-n1g1", 1, warm + [1000, 1010, 990, 980, 1020])  # median 1000
    _finish(sweep / "tiny-sweep-n1g2", 2, warm + [1800, 1700, 1900, 1850, 1750])  # 1800: 900 per GPU
    _finish(sweep / "tiny-sweep-n2g2", 4, warm + [3000, 3200, 3300, 3100, 2900])  # 3100: 775 per GPU
    _finish(sweep / "tiny-sweep-n1g4", 4, warm + [10, 10], complete=False)  # running, or killed
    (sweep / "logs" / "tiny-sweep-n2g4-41.out").write_text(
        "langadapt: job 41 restart 0\nlangadapt: srun exited with 1 at 2026-11-23T01:00:00+00:00\n")
    assert cli.main(["sweep-report", str(sweep)]) == 0
    report = json.loads((sweep / "report.json").read_text())
    rows = {r["name"]: r for r in report["configurations"]}
    assert report["baseline"] == "n1g1" and len(rows) == 5  # nothing silently skipped
    assert (rows["n1g1"]["tokens_per_second"], rows["n1g1"]["efficiency"]) == (1000, 1.0)
    assert (rows["n1g2"]["tokens_per_second_per_gpu"], rows["n1g2"]["efficiency"]) == (900, 0.9)
    assert (rows["n2g2"]["world_size"], rows["n2g2"]["efficiency"]) == (4, 0.775)
    assert rows["n1g1"]["steps_measured"] == 5
    assert rows["n1g4"]["status"] == "incomplete" and "efficiency" not in rows["n1g4"]
    assert rows["n2g4"]["status"] == "failed (exit 1)"
    table = capsys.readouterr().out
    assert "| n1g2 | 1 | 2 | 2 | 1,800 | 900 | 0.90 | - | ok |" in table
    assert "| n2g4 | 2 | 4 | 8 | - | - | - | - | failed (exit 1) |" in table


def test_the_baseline_is_the_smallest_completed_configuration(recipe: Path, tmp_path: Path) -> None:
    sweep = _sweep(tmp_path, recipe, [SweepPoint(1, 1), SweepPoint(1, 2), SweepPoint(1, 4)])
    _finish(sweep / "tiny-sweep-n1g2", 2, [0, 0, 0] + [2000] * 5)
    _finish(sweep / "tiny-sweep-n1g4", 2, [0, 0, 0] + [3600] * 5)  # srun started 2 tasks, not 4
    report = collect(sweep)
    rows = {r["name"]: r for r in report["configurations"]}
    assert report["baseline"] == "n1g2" and rows["n1g2"]["efficiency"] == 1.0
    assert rows["n1g1"]["status"] == "not started"
    assert rows["n1g4"]["status"] == "wrong world size (expected 4)"


def test_a_step_logged_again_after_a_resume_counts_once_with_its_rewrite(recipe: Path,
                                                                         tmp_path: Path) -> None:
    """A resumed stage 2 logs the steps after its checkpoint again: the median is over each step once,
    the last record of a step winning (`run.metrics_log.read_metrics`), not over both attempts."""
    sweep = _sweep(tmp_path, recipe, [SweepPoint(1, 1)])
    _finish(sweep / "tiny-sweep-n1g1", 1, [0, 0, 0] + [1000, 1000, 500, 500, 500])  # steps 4..8, then killed
    rewritten = [{"step": step, "loss": 5.0, "tokens_per_second": 1200.0, "mfu": None} for step in (6, 7, 8)]
    with RunLayout(sweep / "tiny-sweep-n1g1").stage2.metrics.open("a") as metrics:  # resumed at step 5
        metrics.writelines(json.dumps(row) + "\n" for row in rewritten)
    row = collect(sweep)["configurations"][0]
    assert (row["steps_measured"], row["tokens_per_second"]) == (5, 1200)  # counting both: 8 steps, 1000


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--sweep", "nodes=0,2"], "launch --sweep nodes=0,2: values must be distinct and at least 1"),
        (["--sweep", "nodes=2,2"], "values must be distinct"),
        (["--sweep", "node=1,2"], "unknown key 'node' (did you mean nodes?); keys are nodes, gpus"),
        (["--sweep", "nodes=1,two"], "values must be whole numbers"),
        (["--sweep", "nodes"], "expected KEY=V1,V2"),
        (["--sweep", "nodes=1", "nodes=2"], "nodes given twice"),
        (["--sweep", "gpus=4,16"], "launch --sweep gpus=16: preset nvidia-8 has 8 GPUs per node"),
        (["--sweep", "nodes=1,2,3,4,5,6,7,8,9", "gpus=1,2,4,8"], "36 configurations; at most 32"),
        (["--sweep", "nodes=1,2", "--set", f"name={'n' * 95}"],  # n1g8 would run as <name>-sweep-n1g8
         "launch --sweep: the run name of configuration n1g8: 106 characters; at most 100"),
        (["--sweep", "nodes=1,2", "--steps", "7"], "launch --steps 7: need more than --warmup-steps + 2 = 7"),
        (["--sweep", "nodes=1,2", "--warmup-steps", "-1"], "must be 0 or more"),
        (["--steps", "20"], "launch --steps/--warmup-steps: only with --sweep"),
    ],
)
def test_bad_sweeps_are_one_line_errors(argv: list[str], needle: str, recipe: Path, tmp_path: Path,
                                        capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "sw"
    assert _launch(str(recipe), "--slurm", "--preset", "nvidia-8", "--out", str(out), *argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err and err.startswith("langadapt: error: ")
    assert not (out / "sweep.json").exists()


def test_an_existing_sweep_is_never_overwritten(recipe: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    argv = [str(recipe), "--slurm", "--sweep", "nodes=1,2", "--out", str(tmp_path / "sw")]
    assert _launch(*argv) == 0
    before = (tmp_path / "sw" / "sweep.json").read_text()
    assert _launch(*argv) == 2
    assert "already holds a sweep (sweep.json); remove it or choose another folder" in capsys.readouterr().err
    assert (tmp_path / "sw" / "sweep.json").read_text() == before


def test_a_sweep_needs_slurm_and_the_report_a_sweep_folder(recipe: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_:  # argparse: usage and one error line
        _launch(str(recipe), "--sweep", "nodes=1,2")
    assert exit_.value.code == 2 and "the following arguments are required: --slurm" in capsys.readouterr().err
    assert cli.main(["sweep-report", str(tmp_path)]) == 2
    assert f"sweep-report: {tmp_path} is not a sweep folder (no sweep.json" in capsys.readouterr().err
