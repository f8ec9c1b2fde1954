"""A tiny scaling sweep on a real single-node Slurm: nodes=1, gpus=1,2 on CPU (gloo).

submit.sh queues the preparation job and both configurations after it; each configuration trains
stage 2 only, in its own run, from the prepared stages; sweep-report reads both. Slurm is set up,
skipped or required exactly as in test_train_launch_slurm.py (its fixture is used here).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.job_env import inherited_env
from test_train_launch_slurm import CPU_NODE, _wait, slurm  # noqa: F401  (slurm is a fixture)

from langadapt import cli
from langadapt.experiments.sweep import SweepPoint, write_sweep
from langadapt.run.layout import RunLayout

pytestmark = pytest.mark.slow

RECIPE = """\
name: tiny
run_root: {root}/runs
init: scratch
base_model:
  architecture: {{model_type: llama, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2,
                 num_attention_heads: 2, num_key_value_heads: 2}}
data:
  sources:
    - {{name: nb, path: {root}/nb.jsonl, lang: nb, role: target}}
tokenizer:
  vocab_size: 300
stage2:
  steps: 500
  micro_batch_size: 4
  seq_len: 32
"""
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"}


def test_a_tiny_sweep_runs_each_configuration_and_reports_it(slurm: None, tmp_path: Path) -> None:  # noqa: F811
    words = [f"w{i}" for i in range(200)]
    (tmp_path / "nb.jsonl").write_text("".join(
        json.dumps({"text": " ".join(words[(d * 7 + i * 13) % 200] for i in range(80))}) + "\n" for d in range(200)))
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(RECIPE.format(root=tmp_path))
    sweep = write_sweep(recipe, [SweepPoint(1, 1), SweepPoint(1, 2)], run_name="tiny",
                        run_dir=tmp_path / "runs" / "tiny", out_dir=tmp_path / "sweep", steps=12, warmup_steps=3,
                        preset=CPU_NODE, partition="debug", time="10", signal_seconds=60, workdir=tmp_path,
                        command=f"{sys.executable} -m langadapt.cli run")
    env = inherited_env()  # as tests.helpers.slurm.submit does
    done = subprocess.run(["bash", str(sweep / "submit.sh")], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    jobs = dict(line.split(": job ") for line in done.stdout.splitlines())
    assert set(jobs) == {"prepare", "n1g1", "n1g2"}
    for name in ("prepare", "n1g1", "n1g2"):
        state = _wait(jobs[name], ENDED, timeout=300)
        [log] = (sweep / "logs").glob(f"tiny-sweep-{name}-{jobs[name]}.out")
        assert state["JobState"] == "COMPLETED", log.read_text()[-3000:]
    for name in ("n1g1", "n1g2"):  # stage 2 only: the prepared stages were found complete, not redone
        log = (sweep / "logs" / f"tiny-sweep-{name}-{jobs[name]}.out").read_text()
        assert "tokenizer  skip (complete, inputs unchanged)" in log and "stage2     run" in log, log[-3000:]
        assert RunLayout(sweep / f"tiny-sweep-{name}").stage_dir("tokenizer").is_symlink()
    assert cli.main(["sweep-report", str(sweep)]) == 0
    report = json.loads((sweep / "report.json").read_text())
    rows = {r["name"]: r for r in report["configurations"]}
    assert [rows[n]["status"] for n in ("n1g1", "n1g2")] == ["ok", "ok"], rows
    assert (rows["n1g1"]["world_size"], rows["n1g2"]["world_size"]) == (1, 2)  # srun really started 2 ranks
    assert rows["n1g1"]["steps_measured"] == rows["n1g2"]["steps_measured"] == 9
    assert report["baseline"] == "n1g1" and rows["n1g1"]["efficiency"] == 1.0
    assert rows["n1g2"]["efficiency"] == pytest.approx(
        rows["n1g2"]["tokens_per_second"] / 2 / rows["n1g1"]["tokens_per_second"]) and rows["n1g2"]["efficiency"] > 0
