"""One writer per run directory: a second run refuses at once, a dead holder's lock is taken
over, and the ranks of one multi-rank job do not lock each other out."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.recipes import scratch_recipe

from langadapt.errors import LangadaptError
from langadapt.recipe import load_recipe
from langadapt.run import pipeline
from langadapt.run.layout import RunLayout
from langadapt.run.lock import RunLock
from langadapt.run.pipeline import STAGES, Stage, run_pipeline

REPO = Path(__file__).resolve().parents[2]

HOLD = """\
import sys, time
from pathlib import Path
from langadapt.run.lock import RunLock
with RunLock(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(120)
"""


@pytest.fixture()
def recipe(tmp_path: Path) -> Path:
    (tmp_path / "nb.txt").write_text(" ".join(f"ord{i} hei{i * 7}" for i in range(3000)))  # passes preflight
    path = tmp_path / "r.yaml"
    path.write_text(scratch_recipe(tmp_path, "locked"))
    return path


@pytest.fixture(autouse=True)
def no_preflight(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process runs here use stub stages, which read nothing preflight could check."""
    monkeypatch.setattr(pipeline, "check_recipe", lambda loaded, selected: None)


@pytest.fixture()
def stubbed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []

    def fake_table(recipe):
        def make(name):
            def run(ctx):
                calls.append(name)
                return {}
            return run
        return [Stage(name, (), make(name)) for name in STAGES]

    monkeypatch.setattr(pipeline, "stage_table", fake_table)
    return calls


def test_a_second_run_refuses_at_once_naming_the_holder(recipe: Path, tmp_path: Path) -> None:
    lock = RunLayout(tmp_path / "runs" / "locked").lock
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(lock)], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        second = subprocess.run([sys.executable, "-m", "langadapt.cli", "run", str(recipe)],
                                capture_output=True, text=True, cwd=REPO, timeout=120)
        elapsed = time.monotonic() - started
    finally:
        holder.kill()
        holder.wait()
    assert second.returncode == 2
    err = second.stderr.strip()
    assert "\n" not in err and f"pid {holder.pid} on host {socket.gethostname()}" in err
    assert elapsed < 30  # the interpreter start and imports, no stage work
    assert not (tmp_path / "runs" / "locked" / "data").exists()


def test_a_stale_lock_of_a_dead_process_is_taken_over(recipe: Path, stubbed: list[str], caplog) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    layout = RunLayout(load_recipe(recipe).recipe.run_dir)
    layout.root.mkdir(parents=True)
    layout.lock.write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname(), "started": "earlier"}))
    with caplog.at_level(logging.WARNING, logger="langadapt"):
        run_pipeline(load_recipe(recipe))
    assert stubbed[0] == "data" and f"stale lock (pid {dead.pid}" in caplog.text
    assert not layout.lock.exists()  # released after the run


def test_a_lock_from_another_host_is_respected(recipe: Path, stubbed: list[str]) -> None:
    layout = RunLayout(load_recipe(recipe).recipe.run_dir)
    layout.root.mkdir(parents=True)
    layout.lock.write_text(json.dumps({"pid": 1, "host": "other-node", "started": "earlier"}))
    with pytest.raises(LangadaptError, match="in use by pid 1 on host other-node"):
        run_pipeline(load_recipe(recipe))
    assert stubbed == [] and layout.lock.exists()


def test_the_lock_is_released_when_a_stage_fails(recipe: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing_table(recipe):
        def fail(ctx):
            raise LangadaptError("boom")
        return [Stage(name, (), fail) for name in STAGES]

    monkeypatch.setattr(pipeline, "stage_table", failing_table)
    with pytest.raises(LangadaptError, match="boom"):
        run_pipeline(load_recipe(recipe))
    assert not RunLayout(load_recipe(recipe).recipe.run_dir).lock.exists()


def test_ranks_of_one_job_do_not_lock_each_other_out(recipe: Path, stubbed: list[str], monkeypatch) -> None:
    """Under torchrun rank 0 holds the lock; rank 1 runs beside it without touching it."""
    run_pipeline(load_recipe(recipe), until="embeddings")  # the single-process part, done first
    stubbed.clear()
    layout = RunLayout(load_recipe(recipe).recipe.run_dir)
    with RunLock(layout.lock):  # rank 0 of the job, in this process
        monkeypatch.setenv("RANK", "1")
        monkeypatch.setenv("WORLD_SIZE", "2")
        monkeypatch.setattr("langadapt.run.layout.wait_for_fingerprint", lambda folder, fingerprint: False)
        run_pipeline(load_recipe(recipe))
        assert stubbed == ["stage1", "stage2"]  # training only: the other stages are rank 0's
        assert layout.lock.exists()
