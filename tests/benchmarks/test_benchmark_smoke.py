"""Every script of benchmarks/ imports, and runs in its `--smoke` size (issue 39: benchmarks rot).

A benchmark no test runs rots unseen: `train_throughput.py` failed at import for weeks, and it is
the script `benchmarks/gpu_engines.sh` runs first on a lent GPU. The scripts are found by glob, so
a new benchmark without a `--smoke` mode fails here unless RUN_ELSEWHERE names the test that
already runs it.

- Import (fast tier): each script is imported as a module, so a renamed library name fails in
  seconds even where the smoke run is slow.
- Smoke run (`slow`, CI runs it): `python benchmarks/<name>.py --smoke` in a subprocess, from a
  temporary folder, offline and without a GPU (the smoke mode is the CPU path); exit 0 and, as the
  last line of stdout, the JSON record of the benchmark contract (/work/shared/DESIGN.md,
  benchmarks/README.md). A benchmark that needs ../shared prints a record of nulls without it.
- The flags benchmarks/gpu_engines.sh passes to train_throughput.py still parse.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.benchmarks import BENCHMARKS, load_benchmark

NAMES = sorted(path.stem for path in BENCHMARKS.glob("*.py"))
RUN_ELSEWHERE = {
    # name: the test that runs its --smoke already (a second run would only add minutes)
    "data_scale": "tests/benchmarks/test_data_scale_smoke.py (the smoke run and its table, end to end)",
}
CONTRACT = {"benchmark", "metric", "value", "baseline", "ratio", "unit"}
SMOKE_TIMEOUT_S = 300
"""Each smoke run takes 10-40 s on a 2-core machine (most of it importing torch and transformers)."""


def test_the_glob_finds_the_benchmarks_and_the_allow_list_is_not_stale():
    assert {"train_throughput", "warm_vs_cold", "data_prep"} <= set(NAMES)
    assert set(RUN_ELSEWHERE) <= set(NAMES), set(RUN_ELSEWHERE) - set(NAMES)
    for name, test in RUN_ELSEWHERE.items():
        test_file = BENCHMARKS.parent / test.split()[0]
        assert test_file.is_file(), f"{name}: {test_file} not found"
        assert f"{name}.py" in test_file.read_text(encoding="utf-8"), f"{test_file} does not run {name}.py"


@pytest.mark.parametrize("name", NAMES)
def test_every_benchmark_imports_and_documents_its_smoke_mode(name: str):
    module = load_benchmark(name)
    assert module.__doc__ and "--smoke" in module.__doc__, f"benchmarks/{name}.py: its docstring names no --smoke"


def last_json_line(stdout: str) -> dict:
    lines = stdout.strip().splitlines()
    assert lines, "nothing on stdout"
    record = json.loads(lines[-1])
    assert isinstance(record, dict), lines[-1]
    return record


@pytest.mark.slow
@pytest.mark.parametrize("name", [name for name in NAMES if name not in RUN_ELSEWHERE])
def test_smoke_mode_runs_and_ends_with_the_contract_line(name: str, tmp_path: Path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([sys.executable, str(BENCHMARKS / f"{name}.py"), "--smoke"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=SMOKE_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = last_json_line(done.stdout)
    assert CONTRACT <= set(record), f"keys missing: {CONTRACT - set(record)} in {record}"
    assert record["benchmark"] == name
    value = record["value"]
    assert value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)), value


def gpu_engines_presets() -> dict[str, list[str]]:
    """preset -> the arguments benchmarks/gpu_engines.sh passes train_throughput.py with it."""
    script = (BENCHMARKS / "gpu_engines.sh").read_text(encoding="utf-8")
    presets = {m[1]: shlex.split(m[2]) for m in re.finditer(r"^\s*([\w-]+)\) args=\((.*)\) ;;$", script, re.MULTILINE)}
    assert presets, "no `<preset>) args=(...) ;;` line found in benchmarks/gpu_engines.sh"
    return presets


def test_gpu_engines_sh_passes_flags_train_throughput_parses():
    script = (BENCHMARKS / "gpu_engines.sh").read_text(encoding="utf-8")
    for called in re.findall(r"benchmarks/(\w+)\.py", script):
        assert (BENCHMARKS / f"{called}.py").is_file(), called
    bench = load_benchmark("train_throughput")
    parser = bench.build_parser()
    for preset, args in gpu_engines_presets().items():
        assert preset in bench.PRESETS, preset
        parsed = parser.parse_args(["--preset", preset, *args])  # exits (SystemExit) on an unknown flag
        assert parsed.preset == preset and not parsed.smoke
        assert parsed.deepspeed_bf16_gradients is False or bench.PRESETS[preset]["precision"] == "bf16"


def test_a_flag_gpu_engines_sh_would_pass_and_train_throughput_lost_fails_to_parse():
    """The check above can fail: an unknown flag is refused, not ignored."""
    parser = load_benchmark("train_throughput").build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["--preset", "gpu-1b", "--zero-stages", "1"])
