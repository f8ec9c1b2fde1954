"""One writer per run directory: `runs/<name>/.lock`, created atomically, naming its holder.

Two `langadapt run` on one run directory would both write into the same stage folders (a
manifest from one, checkpoints and metrics from both). The lock file is created with O_EXCL, so
exactly one process wins; it holds `{"pid", "host", "started"}` so the loser can say who holds
it. A lock left by a process that died on this host is taken over with a warning; one from
another host cannot be checked from here and is reported as held (the message says which file
to delete). Under torchrun/srun only rank 0 takes it: the ranks of one job are one writer.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from pathlib import Path
from types import TracebackType

from langadapt.errors import LangadaptError
from langadapt.ioerrors import make_folder

log = logging.getLogger("langadapt")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


class RunLock:
    """Context manager: hold `path` for the duration of a pipeline run.

    `wait`: when a live process on this host holds it, wait for that process to finish instead of
    refusing. For the runs another run depends on (the base model's build, the cold twin): two runs
    started together on one base both need its build, and the second should use it once the first
    has built it, not fail. A holder on another host cannot be checked from here and is refused."""

    POLL_S = 2.0

    def __init__(self, path: Path, wait: bool = False) -> None:
        self.path = path
        self.wait = wait
        self.held = False

    def acquire(self) -> None:
        # The run folder is made here, before anything else is written into it: a run_root this
        # user cannot write (or a read-only one) is one line, not a traceback.
        make_folder(self.path.parent, "run folder")
        me = {"pid": os.getpid(), "host": socket.gethostname(),
              "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        takeovers = 0
        while takeovers < 3:  # a takeover race with a third process: try again, then give up
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = _read(self.path)
                if self.wait and holder.get("host") == socket.gethostname() and _alive(int(holder.get("pid", 0))):
                    self._wait_for(holder)
                else:
                    self._take_over_if_stale()
                    takeovers += 1
                continue
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(me))
            self.held = True
            return
        self._raise_held(_read(self.path))

    def _wait_for(self, holder: dict) -> None:
        """Until the holder lets go or dies (a dead one's lock is then taken over as stale)."""
        log.info("%s is in use by pid %s (since %s): waiting for it to finish", self.path.parent,
                 holder.get("pid"), holder.get("started", "?"))
        while _read(self.path) == holder and _alive(int(holder.get("pid", 0))):
            time.sleep(self.POLL_S)

    def _take_over_if_stale(self) -> None:
        holder = _read(self.path)
        if not holder:  # created but not yet written by its holder: give it a moment
            time.sleep(0.2)
            holder = _read(self.path)
        if not holder and time.time() - self._mtime() < 5:
            self._raise_held(holder)
        if holder and (holder.get("host") != socket.gethostname() or _alive(int(holder.get("pid", 0)))):
            self._raise_held(holder)
        log.warning("run lock %s: taking over a stale lock (pid %s on %s, started %s, is gone)",
                    self.path, holder.get("pid", "?"), holder.get("host", "?"), holder.get("started", "?"))
        self.path.unlink(missing_ok=True)

    def _mtime(self) -> float:
        try:
            return self.path.stat().st_mtime
        except OSError:
            return 0.0

    def _raise_held(self, holder: dict) -> None:
        raise LangadaptError(
            f"{self.path.parent}: run directory is in use by pid {holder.get('pid', '?')} on host "
            f"{holder.get('host', '?')} (since {holder.get('started', '?')}); wait for it, or delete "
            f"{self.path} if that process is gone")

    def release(self) -> None:
        if self.held and _read(self.path).get("pid") == os.getpid():
            self.path.unlink(missing_ok=True)
        self.held = False

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()
