"""One writer per run directory: a second run refuses at once, a dead holder's lock is taken
over, and the ranks of one multi-rank job do not lock each other out."""

from __future__ import annotations

import errno
import getpass
import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.recipes import scratch_recipe

from langadapt.errors import LangadaptError
from langadapt.recipe import load_recipe
from langadapt.pipeline import runner as pipeline
from langadapt.run.layout import RunLayout
from langadapt.run.lock import RunLock
from langadapt.pipeline.runner import STAGES, Stage, run_pipeline

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
        monkeypatch.setattr("langadapt.run.completion.wait_for_fingerprint", lambda folder, fingerprint: None)
        run_pipeline(load_recipe(recipe))
        assert stubbed == ["stage1", "stage2"]  # training only: the other stages are rank 0's
        assert layout.lock.exists()


# --- a run_root the user cannot write (issue 32, item 3) --------------------------------------------

def _unwritable(monkeypatch: pytest.MonkeyPatch, folder: Path, code: int) -> None:
    """mkdir of anything directly inside `folder` fails with `code`, as for a mode-555 folder (EACCES)
    or a read-only file system (EROFS) when not root; root's mkdir ignores the mode bits."""
    real = Path.mkdir

    def mkdir(self: Path, *args, **kwargs) -> None:
        if self.parent == folder:
            raise OSError(code, os.strerror(code), str(self))
        real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir)


def _recipe_under(tmp_path: Path, folder: Path) -> Path:
    (tmp_path / "nb.txt").write_text(" ".join(f"ord{i} hei{i * 7}" for i in range(3000)))
    path = tmp_path / "r.yaml"
    path.write_text(scratch_recipe(tmp_path, "locked").replace(f"run_root: {tmp_path}/runs", f"run_root: {folder}/runs"))
    return path


@pytest.mark.parametrize(("code", "problem"), [(errno.EACCES, "permission denied"),
                                               (errno.EROFS, "read-only file system")])
def test_a_run_root_the_user_cannot_write_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      stubbed: list[str], code: int, problem: str) -> None:
    """Before: a PermissionError traceback from the run lock's mkdir (a read-only file system was
    already one line, through the CLI's last resort). Both now go through `ioerrors.make_folder`."""
    folder = tmp_path / "ro"
    folder.mkdir()
    path = _recipe_under(tmp_path, folder)
    _unwritable(monkeypatch, folder, code)
    with pytest.raises(LangadaptError) as raised:
        run_pipeline(load_recipe(path))
    line = str(raised.value)
    assert "\n" not in line and stubbed == []
    assert line.startswith(f"run folder {folder / 'runs' / 'locked'}: cannot write: {problem}"), line
    if code == errno.EACCES:
        assert f"({folder} is not writable by " in line and "set run_root to a folder you can write" in line


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a mode-555 folder anyway: the monkeypatched "
                    "test above stands in for it")
def test_a_run_root_under_a_mode_555_folder_is_one_line_as_a_normal_user(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    path = _recipe_under(tmp_path, folder)
    folder.chmod(0o555)
    try:
        result = subprocess.run([sys.executable, "-m", "langadapt.cli", "run", str(path)],
                                check=False, capture_output=True, text=True, cwd=REPO, timeout=120)
    finally:
        folder.chmod(0o755)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip() == (f"langadapt: error: run folder {folder / 'runs' / 'locked'}: cannot write: "
                                     f"permission denied ({folder} is not writable by {getpass.getuser()}); set "
                                     f"run_root to a folder you can write, or get write access to {folder}")


def test_a_dependency_run_waits_for_the_process_building_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two runs on one base started together: the second waits for the first's build of the base
    (RunLock wait=True, what `_run_dependency` asks for), where a plain run is refused at once."""
    lock = tmp_path / "base_run" / ".lock"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import json, os, socket, sys, time; from pathlib import Path\n"
        f"p = Path({str(lock)!r}); p.parent.mkdir(parents=True, exist_ok=True)\n"
        "p.write_text(json.dumps({'pid': os.getpid(), 'host': socket.gethostname(), 'started': 'now'}))\n"
        "print('held', flush=True); time.sleep(1.5); p.unlink()\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(LangadaptError, match="run directory is in use by pid"):
            RunLock(lock).acquire()
        monkeypatch.setattr(RunLock, "POLL_S", 0.05)
        start = time.monotonic()
        with RunLock(lock, wait=True):
            assert json.loads(lock.read_text())["pid"] == os.getpid()
            assert holder.poll() is not None or time.monotonic() - start > 1.0  # it waited for the holder
        assert not lock.exists()
    finally:
        holder.kill()
        holder.wait()


def test_dependency_runs_ask_to_wait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recipe: Path,
                                    stubbed: list[str]) -> None:
    """A run this one needs (the base build, the cold twin) waits for another process holding its
    lock instead of refusing, and keeps its complete stages."""
    from dataclasses import replace

    from langadapt.pipeline.stages import Dependency

    inner = tmp_path / "inner.yaml"
    inner.write_text(scratch_recipe(tmp_path, "inner"))
    needed = Dependency("base", "the base model", load_recipe(inner), RunLayout(tmp_path / "runs" / "inner").data.root)
    stubs = pipeline.stage_table
    monkeypatch.setattr(pipeline, "stage_table", lambda r: [
        replace(stage, needs=lambda ctx: needed) if r.name == "locked" and stage.name == "tokenizer" else stage
        for stage in stubs(r)])
    the_pipeline, seen = pipeline.run_pipeline, []

    def recording(loaded, **kwargs):
        seen.append((loaded.recipe.name, kwargs))
        return the_pipeline(loaded, **kwargs)

    monkeypatch.setattr(pipeline, "run_pipeline", recording)
    the_pipeline(load_recipe(recipe), until="tokenizer")
    assert seen == [("inner", {"force": False, "wait_for_lock": True})]
    assert stubbed[0] == stubbed[1] == "data" and stubbed[-1] == "tokenizer"  # the inner run in between
