"""auto turns on a GPU fast path only where tests/gpu/RESULTS.md records it as run (issue 32)."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.gpu_suite import FAST_PATH_LAYOUTS, FORCED_ON_GPU, GPU_DEFAULT_TESTS, GPU_TEST_FOR, RECORDED_BY

from langadapt.planning import training as train_settings
from langadapt.planning.gpu_record import RAN_ON_GPU, layout_name
from langadapt.planning.training import check_engine
from langadapt.recipe.train import EngineConfig, TrainStageConfig

RESULTS = Path(__file__).resolve().parents[1] / "gpu" / "RESULTS.md"


def _sections() -> dict[str, str]:
    """RESULTS.md's sections by heading ("2026-11-23 01:13 UTC, NVIDIA H100 80GB HBM3")."""
    parts = re.split(r"^## (.+)$", RESULTS.read_text(encoding="utf-8"), flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


@pytest.mark.parametrize("key", sorted(RAN_ON_GPU))
def test_every_recorded_fast_path_is_a_passing_test_of_that_gpu_run(key: tuple[str, str]) -> None:
    run = RAN_ON_GPU[key]
    body = _sections().get(run.section)
    assert body is not None, f"{key}: no section '{run.section}' in tests/gpu/RESULTS.md"
    assert body.strip().splitlines()[0].startswith(run.versions)
    test = RECORDED_BY[key]  # the test suite's name for the run (tests/helpers/gpu_suite.py)
    assert re.search(rf"^\| {re.escape(test)} \| passed \|", body, flags=re.MULTILINE), (key, test)
    assert key[1] in FAST_PATH_LAYOUTS


def test_every_recorded_fast_path_names_its_test_and_no_other() -> None:
    """RAN_ON_GPU (shipped) and RECORDED_BY (the test names, tests/helpers) hold the same pairs."""
    assert set(RECORDED_BY) == set(RAN_ON_GPU)


def _resolve(kind: str, zero: int) -> EngineConfig:
    return check_engine("stage2", TrainStageConfig(), EngineConfig(kind=kind, zero_stage=zero), "cuda")


@pytest.mark.parametrize(("kind", "zero"), [("torch", 0), ("deepspeed", 1), ("deepspeed", 2), ("deepspeed", 3), ("fsdp", 0)])
def test_auto_on_a_gpu_turns_on_exactly_what_ran_there(kind: str, zero: int, monkeypatch, caplog) -> None:
    monkeypatch.setattr(train_settings, "liger_available", lambda: True)
    with caplog.at_level(logging.WARNING, logger="langadapt.train"):
        engine = _resolve(kind, zero)
    layout = layout_name(kind, zero)
    for path in ("compile", "fused_loss"):
        recorded = (path, layout) in RAN_ON_GPU
        assert getattr(engine, path) is recorded, (path, layout)
        said = f"engine.{path}: auto leaves it off under {layout}" in caplog.text
        assert said is not recorded  # off is never silent: the warning names the opt-in
    assert (engine.compile, engine.fused_loss) == (True, True)  # every layout has run both (H200, 2026-11-28)


def test_auto_leaves_off_and_says_so_a_pair_that_has_not_run(monkeypatch, caplog) -> None:
    """Every pair has run today; a new layout or fast path starts unrecorded, and auto must say why it is off."""
    from langadapt.planning import gpu_record

    monkeypatch.setattr(train_settings, "liger_available", lambda: True)
    monkeypatch.setattr(gpu_record, "RAN_ON_GPU", {k: v for k, v in RAN_ON_GPU.items() if k != ("compile", "fsdp")})
    with caplog.at_level(logging.WARNING, logger="langadapt.train"):
        engine = _resolve("fsdp", 0)
    assert (engine.compile, engine.fused_loss) == (False, True)
    assert "engine.compile: auto leaves it off under fsdp" in caplog.text
    assert "engine.fused_loss: auto leaves it off" not in caplog.text


def test_true_opts_in_where_auto_would_not(monkeypatch) -> None:
    monkeypatch.setattr(train_settings, "liger_available", lambda: True)
    engine = check_engine("stage2", TrainStageConfig(), EngineConfig(kind="fsdp", compile=True, fused_loss=True), "cuda")
    assert (engine.compile, engine.fused_loss) == (True, True)


def _gpu_suite_test_names() -> set[str]:
    """The names of tests/gpu's tests as RESULTS.md records them (junit: function[parameter id]),
    from pytest's own collection (the suite skips itself here, but collects)."""
    root = RESULTS.parents[2]
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider",
                           str(RESULTS.parent)], cwd=root, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return {line.split("::", 1)[1] for line in done.stdout.splitlines() if "::" in line}


def test_one_gpu_run_settles_every_fast_path_and_default() -> None:
    """Every (fast path, layout) pair has run on a GPU or has a GPU test forcing it on, and every
    default GPU_DEFAULT_TESTS names is checked by a test that exists: `bash tests/gpu/run.sh` once
    settles all of them, and its RESULTS.md table names what to add to RAN_ON_GPU."""
    pairs = {(path, layout) for path in ("compile", "fused_loss") for layout in FAST_PATH_LAYOUTS}
    assert set(RAN_ON_GPU) | set(GPU_TEST_FOR) == pairs
    assert set(GPU_TEST_FOR) - pairs == set() and not set(GPU_TEST_FOR) & set(RAN_ON_GPU)
    assert {layout_name(kind, zero) for kind, zero in (("torch", 0), ("fsdp", 0), *(("deepspeed", z) for z in (1, 2, 3)))} \
        == set(FAST_PATH_LAYOUTS)
    names = _gpu_suite_test_names()
    forced = [f"test_forced_fast_path_on_gpu_trains_as_the_plain_path[{path}-{layout}]" for path, layout in FORCED_ON_GPU]
    named = [*forced, *GPU_TEST_FOR.values(), *(test for tests in GPU_DEFAULT_TESTS.values() for test in tests)]
    assert [test for test in named if test not in names] == []
