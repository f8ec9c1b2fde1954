"""`python benchmarks/data_scale.py --smoke` end to end: a few MB generated from ../shared, the
data and tokenizer stages with 1 and 2 workers as subprocesses, the table and the last-line JSON.

Skips (or fails under LANGADAPT_TEST_REQUIRE_SHARED=1) without ../shared, through the
`shared_dir` fixture of tests/conftest.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.benchmarks import BENCHMARKS

pytestmark = pytest.mark.slow


def test_smoke_run_ends_with_the_benchmark_json_line(shared_dir: Path, tmp_path: Path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1"}  # as test_benchmark_smoke.py runs the other benchmarks
    done = subprocess.run([sys.executable, str(BENCHMARKS / "data_scale.py"), "--smoke", "--keep", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    record = json.loads(lines[-1])
    assert {"benchmark", "metric", "value", "baseline", "ratio", "unit"} <= set(record)
    assert record["benchmark"] == "data_scale" and record["metric"] == "cpu_s_per_gb"
    assert record["unit"] == "CPU-s/GB" and record["workers"] == 2
    assert record["value"] > 0 and record["baseline"] > 0 and record["ratio"] > 0
    assert set(record["per_size"]["0.002GB"]) == {"w1", "w2"}
    text = done.stdout
    for stage in ("| data ", "| tokenizer ", "| data+tokenizer "):
        assert stage in text
    assert "headline recipe (recipes/norwegian_warm.yaml" in text
    # --keep keeps the generated corpus (for the next run to reuse), not the runs
    assert len(list((tmp_path / "corpora").glob("corpus-0.002gb-v*/corpus.json"))) == 1
    assert not list((tmp_path / "runs").iterdir())  # each run's folder is removed once measured
