"""OS-level trouble a user fixes while langadapt writes, as one line: disk full, quota exceeded,
read-only file system, a folder not writable by this user, a file where a folder is needed.

They surface in many shapes: `OSError(ENOSPC)` from Python, `SafetensorError` ("No space left
on device (os error 28)") from safetensors, a `RuntimeError` from torch's zip writer whose
context is the OS error. `disk_error_line` recognises them along the exception chain, and
`writing(path, what)` turns one into a `LangadaptError` naming the path being written; the CLI
uses the same function (`os_error_line`) for writes no `writing` block wraps. A folder the run
writes into (the run folder under run_root, made by the run lock first) is made by `make_folder`,
through the same `writing`: besides the disk failures, a folder this user may not write into
(`EACCES`/`EPERM`, a run_root under a mode-555 folder) is one line naming the folder in the way,
not a traceback.

Reading a user's input (opening, bounding, decompressing, parsing) is `langadapt.inputs`'s.
"""

from __future__ import annotations

import errno
import getpass
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from langadapt.errors import LangadaptError

DISK_ERRNOS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EFBIG: "file too large for this file system (or ulimit -f)",
}
_MESSAGES = {"No space left on device": errno.ENOSPC, "os error 28": errno.ENOSPC, "StorageFull": errno.ENOSPC,
             "Disk quota exceeded": errno.EDQUOT, "Read-only file system": errno.EROFS}
FULL_BELOW_BYTES = 1 << 20
"""Free space below which a file system counts as full (tmpfs and quotas leave a few blocks)."""
PATH_LOCALS = ("path", "save_directory", "directory", "folder", "tmp", "final", "out", "filename")
"""Local names under which langadapt and its libraries hold the path being written (a last resort
when the error carries no file name)."""


def disk_problem(exc: BaseException) -> str | None:
    """'no space left on device' (etc.) when `exc` or its cause/context is such a failure."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in DISK_ERRNOS:
            return DISK_ERRNOS[current.errno]
        if not isinstance(current, OSError):  # SafetensorError, torch's RuntimeError: only a message
            for text, code in _MESSAGES.items():
                if text in str(current):
                    return DISK_ERRNOS[code]
        current = current.__cause__ or current.__context__
    return None


def written_path(exc: BaseException) -> str | None:
    """The file an I/O error was about: its `filename`, else a path-named local in the deepest frame."""
    current: BaseException | None = exc
    while current is not None:
        if isinstance(current, OSError) and current.filename:
            return str(current.filename)
        current = current.__cause__ or current.__context__
    tb, found = exc.__traceback__, None
    while tb is not None:
        for name in PATH_LOCALS:
            value = tb.tb_frame.f_locals.get(name)
            if isinstance(value, (str, Path)) and str(value):
                found = str(value)
                break
        tb = tb.tb_next
    return found


def _full_at(path: str | None) -> bool:
    """The file system holding `path` (or its nearest existing parent) has (almost) no space left."""
    if path is None:
        return False
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return shutil.disk_usage(probe).free < FULL_BELOW_BYTES
    except OSError:
        return False


def disk_error_line(exc: BaseException, path: Path | str | None = None) -> str | None:
    """One line for a disk failure (None for anything else): path, problem, what to do.

    torch's zip writer reports a full disk as "unexpected pos ..." with no errno; a failed write
    on a file system with no space left is taken to be that."""
    where = str(path) if path is not None else written_path(exc)
    problem = disk_problem(exc)
    if problem is None and isinstance(exc, (OSError, RuntimeError)) and _full_at(where):
        problem = DISK_ERRNOS[errno.ENOSPC]
    if problem is None:
        return None
    where = where or "a file of this run"
    return (f"{where}: cannot write: {problem}; free space (or move run_root) and run again: "
            "completed stages and checkpoints are kept")


ACCESS_ERRNOS = {errno.EACCES: "permission denied", errno.EPERM: "operation not permitted"}
"""What a write into a folder this user may not write into fails with (mode 555, another owner)."""


def _os_error(exc: BaseException) -> OSError | None:
    """The first OSError along `exc`'s cause/context chain (a library may wrap it)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError):
            return current
        current = current.__cause__ or current.__context__
    return None


def _user() -> str:
    """This process's user name (its uid where the name cannot be looked up, as in a container)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.geteuid()}"


def access_error_line(exc: BaseException, path: Path | str | None = None) -> str | None:
    """One line for a write refused by permissions (None for anything else): the folder in the way
    and what to do. The folder is the parent of what could not be made (mkdir, open for writing),
    or the file itself when it exists and is read-only."""
    error = _os_error(exc)
    if error is None or error.errno not in ACCESS_ERRNOS:
        return None
    where = str(path) if path is not None else (str(error.filename) if error.filename else "a file of this run")
    blocked = Path(str(error.filename)) if error.filename else Path(where)
    if not blocked.exists():
        blocked = blocked.parent
    return (f"{where}: cannot write: {ACCESS_ERRNOS[error.errno]} ({blocked} is not writable by {_user()}); "
            f"set run_root to a folder you can write, or get write access to {blocked}")


SHAPE_ERRNOS = {errno.EEXIST, errno.ENOTDIR, errno.EISDIR}
"""What writing fails with when a path is of the wrong kind: a file where a folder is needed (the
run folder, or a folder on the way to it) or a folder where a file is to be written."""


def _file_on_the_way(path: Path) -> Path | None:
    """The first existing path from the root down to `path` that is not a folder."""
    for part in (*reversed(path.parents), path):
        if part.exists() and not part.is_dir():
            return part
    return None


def shape_error_line(exc: BaseException, path: Path | str | None = None) -> str | None:
    """One line for a path of the wrong kind (None for anything else): which path is a file where
    a folder is needed, or a folder where a file is to be written."""
    error = _os_error(exc)
    if error is None or error.errno not in SHAPE_ERRNOS or not error.filename:
        return None
    failed = Path(str(error.filename))
    where = str(path) if path is not None else str(failed)
    if error.errno == errno.EISDIR:
        return f"{where}: cannot write: {failed} is a folder where a file is to be written; move it away or choose another path"
    blocker = _file_on_the_way(failed)
    if blocker is None:  # EEXIST of a folder (a bug of ours, not the user's), or the file is gone again
        return None
    return f"{where}: cannot write: {blocker} is a file where a folder is needed; move it away or choose another path"


def os_error_line(exc: BaseException, path: Path | str | None = None) -> str | None:
    """One line for an OS failure the user fixes (a full or read-only disk, a folder not writable
    by this user, a file where a folder is needed or the reverse), or None for anything else: the
    one place such errors become lines (`writing` blocks and the CLI's last resort)."""
    return disk_error_line(exc, path) or access_error_line(exc, path) or shape_error_line(exc, path)


@contextmanager
def writing(path: Path, what: str) -> Iterator[None]:
    """Turn a disk or permission failure inside the block into a LangadaptError naming `path`
    (`what`: e.g. "checkpoint")."""
    try:
        yield
    except Exception as exc:
        line = os_error_line(exc, path)
        if line is None:
            raise
        raise LangadaptError(f"{what} {line}") from exc


def make_folder(path: Path, what: str) -> Path:
    """Create the folder `path` (and its parents) as `writing` reports a failure: a run_root under
    a folder this user cannot write, on a read-only or full file system, is one line naming the
    folder, where a bare `mkdir` raised a traceback from wherever the folder was first needed."""
    with writing(path, what):
        path.mkdir(parents=True, exist_ok=True)
    return path

