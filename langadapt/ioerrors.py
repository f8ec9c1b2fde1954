"""Disk full, quota exceeded, read-only file system: write failures a user fixes, as one line.

They surface in many shapes: `OSError(ENOSPC)` from Python, `SafetensorError` ("No space left
on device (os error 28)") from safetensors, a `RuntimeError` from torch's zip writer whose
context is the OS error. `disk_error_line` recognises them along the exception chain, and
`writing(path, what)` turns one into a `LangadaptError` naming the path being written; the CLI
uses the same function for writes no `writing` block wraps.
"""

from __future__ import annotations

import errno
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


@contextmanager
def writing(path: Path, what: str) -> Iterator[None]:
    """Turn a disk failure inside the block into a LangadaptError naming `path` (`what`: e.g. "checkpoint")."""
    try:
        yield
    except Exception as exc:
        line = disk_error_line(exc, path)
        if line is None:
            raise
        raise LangadaptError(f"{what} {line}") from exc
