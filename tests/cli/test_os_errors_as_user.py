"""OS errors at the CLI's boundary as a normal user would meet them (issue 32 item 3): each is one
line and exit 2, through `ioerrors.os_error_line`, never a traceback.

Permission tests mean nothing as root (root writes into a mode-555 folder and reads a mode-000
file), so as root the CLI runs as the user `langadapt-tester` through `runuser`; set it up with
`useradd -m langadapt-tester`, and let that user reach this Python (an interpreter under a mode-700
/root needs `chmod o+x /root`). Without the user or `runuser` these tests skip and say why; run
by a normal user they run as that user. A full disk is tested with a small tmpfs in
test_ioerrors.py.
"""

from __future__ import annotations

import errno
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers.recipes import scratch_recipe

from langadapt.ioerrors import os_error_line

TESTER = "langadapt-tester"
CORPUS = "Dette er en setning på bokmål.\n\nEn annen setning her.\n" * 20


def _command_as_user() -> list[str]:
    """The prefix that runs a command as a normal user; skips with the reason when there is none."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam(TESTER)
    except KeyError:
        pytest.skip(f"running as root and no user {TESTER} to test permissions as (useradd -m {TESTER})")
    if shutil.which("runuser") is None:
        pytest.skip("running as root and no runuser to switch to a normal user")
    prefix = ["runuser", "-u", TESTER, "--"]
    probe = subprocess.run([*prefix, sys.executable, "-c", "import langadapt.cli"], capture_output=True, text=True,
                           cwd="/", check=False, timeout=120)
    if probe.returncode != 0:
        pytest.skip(f"{TESTER} cannot run {sys.executable} with langadapt (make it and the checkout readable, "
                    f"e.g. chmod o+x /root): {probe.stderr.strip().splitlines()[-1:]}")
    return prefix


@pytest.fixture
def workspace() -> Iterator[tuple[list[str], Path, Callable[[Path], None]]]:
    """The command prefix, a folder the user can reach (pytest's tmp_path is private to root) and
    a function that hands a path to that user; made writable again and removed afterwards."""
    prefix = _command_as_user()
    folder = Path(tempfile.mkdtemp(prefix="langadapt-as-user-"))
    folder.chmod(0o755)
    uid = pwd.getpwnam(TESTER).pw_uid if prefix else os.getuid()

    def give(path: Path) -> None:
        if prefix:
            os.chown(path, uid, -1)

    give(folder)
    try:
        yield prefix, folder, give
    finally:
        for path in folder.rglob("*"):
            if not path.is_symlink():
                path.chmod(0o755)
        shutil.rmtree(folder)


def _recipe(folder: Path, name: str, run_root: Path, source: Path) -> Path:
    path = folder / f"{name}.yaml"
    text = scratch_recipe(folder, name).replace(f"run_root: {folder}/runs", f"run_root: {run_root}")
    path.write_text(text.replace(f"path: {folder}/nb.txt", f"path: {source}"), encoding="utf-8")
    return path


def _case(folder: Path, give: Callable[[Path], None], case: str) -> tuple[Path, str]:
    """Set up one case; the recipe to run and what its error line must say."""
    corpus = folder / "nb.txt"
    corpus.write_text(CORPUS, encoding="utf-8")
    if case == "run_root under a mode-555 folder":
        (locked := folder / "locked").mkdir()
        give(locked)
        locked.chmod(0o555)
        return _recipe(folder, "a", locked / "runs", corpus), f"cannot write: permission denied ({locked} is not writable"
    if case == "recipe file mode 000":
        recipe = _recipe(folder, "b", folder / "runs", corpus)
        give(recipe)
        recipe.chmod(0)
        return recipe, f"{recipe}: cannot read the recipe file: Permission denied"
    if case == "corpus file mode 000":
        (secret := folder / "secret.txt").write_text(CORPUS, encoding="utf-8")
        give(secret)
        secret.chmod(0)
        return _recipe(folder, "c", folder / "runs", secret), f"cannot read {secret}: Permission denied"
    if case == "run folder is a file":
        (runs := folder / "runs").mkdir()
        give(runs)
        (runs / "e").write_text("", encoding="utf-8")
        return _recipe(folder, "e", runs, corpus), f"{runs / 'e'} is a file where a folder is needed"
    (runs_file := folder / "runs_file").write_text("", encoding="utf-8")  # run_root is a file
    return _recipe(folder, "d", runs_file, corpus), f"run_root: {runs_file} is a file, not a folder"


CASES = ["run_root under a mode-555 folder", "recipe file mode 000", "corpus file mode 000",
         "run folder is a file", "run_root is a file"]


@pytest.mark.parametrize("case", CASES)
def test_each_os_error_is_one_line_as_a_normal_user(case: str, workspace: tuple[list[str], Path, Callable]) -> None:
    prefix, folder, give = workspace
    recipe, expected = _case(folder, give, case)
    done = subprocess.run([*prefix, sys.executable, "-m", "langadapt.cli", "run", str(recipe), "--until", "data"],
                          cwd=folder, capture_output=True, text=True, timeout=300, check=False)
    err = done.stderr.strip()
    assert done.returncode == 2, err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("langadapt: error: ") and expected in err, err


@pytest.mark.parametrize(("code", "expected"), [
    (errno.ENOTDIR, "{blocker} is a file where a folder is needed"),
    (errno.EEXIST, "{blocker} is a file where a folder is needed"),
    (errno.EISDIR, "{folder} is a folder where a file is to be written"),
    (errno.ENOSPC, "no space left on device"),
    (errno.EROFS, "read-only file system"),
])
def test_the_one_place_names_the_path_in_the_way(tmp_path: Path, code: int, expected: str) -> None:
    blocker = tmp_path / "runs"
    blocker.write_text("", encoding="utf-8")
    target = tmp_path if code == errno.EISDIR else (blocker if code == errno.EEXIST else blocker / "demo" / "data")
    try:
        raise RuntimeError("a library's wrapper") from OSError(code, os.strerror(code), str(target))
    except RuntimeError as exc:
        line = os_error_line(exc)
    assert line is not None and "\n" not in line
    assert expected.format(blocker=blocker, folder=tmp_path) in line and line.startswith(f"{target}: cannot write")
    assert os_error_line(OSError(errno.ENOENT, "No such file or directory", str(target))) is None
