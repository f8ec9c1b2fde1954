"""Stopping cleanly when the scheduler asks: SIGTERM / SIGUSR1 -> checkpoint -> requeue exit code.

Slurm sends SIGTERM at the time limit (and, with `#SBATCH --signal=USR1@120`, SIGUSR1 two
minutes before it); torchrun forwards SIGTERM to its workers. The handler only sets a flag: the
loop finishes the step it is in, all ranks agree on the flag, write a complete checkpoint, and
the process exits with `REQUEUE_EXIT_CODE`. The launcher's sbatch script treats that code as
"requeue me" (`scontrol requeue $SLURM_JOB_ID`), and the requeued job resumes from the
checkpoint because `langadapt run` always resumes from the latest complete one.

A signal can come before the loop exists: Slurm's warning may land while the model is still
loading, and an unhandled SIGUSR1 kills the process (no checkpoint, no requeue). `langadapt run`
therefore calls `latch_stop_signals()` first thing; a signal latched there makes the next loop
stop after its first step, and the pipeline stop between stages (`stop_pending()`). This
module imports nothing heavy, so the latch is in place before torch is imported.
"""

from __future__ import annotations

import logging
import signal
from types import FrameType, TracebackType

log = logging.getLogger("langadapt.train")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)

REQUEUE_EXIT_CODE = 75
"""Exit code meaning "checkpointed, please requeue me" (sysexits EX_TEMPFAIL, "try again later").

The training loop exits with it after a SIGUSR1/SIGTERM-triggered checkpoint; the generated
sbatch script requeues the job when srun returns it. Chosen apart from 1 (crash), 124 (coreutils
`timeout`), 128+N (killed by signal N) so a requeue is never confused with a failure."""

_latched: list[int] = []
"""Stop signals received in this process so far (by the latch or by a loop's handler)."""


def _remember(signum: int) -> None:
    if not _latched:
        log.warning("received %s: stopping at the next checkpoint or stage boundary, then exiting %d",
                    signal.Signals(signum).name, REQUEUE_EXIT_CODE)
    _latched.append(signum)


def latch_stop_signals() -> None:
    """From now on SIGTERM/SIGUSR1 are remembered instead of killing the process (main thread only)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda signum, frame: _remember(signum))


def stop_pending() -> bool:
    """Whether a stop signal has arrived in this process."""
    return bool(_latched)


def clear_stop() -> None:
    """Forget received signals (for a library caller that handled the stop and goes on)."""
    _latched.clear()


class Preempted(SystemExit):
    """Raised once a stop signal has been honoured (checkpoint written, or between stages);
    SystemExit so no stage is marked complete and `except Exception` handlers let it through to
    the exit code, `REQUEUE_EXIT_CODE`."""

    def __init__(self, where: str) -> None:
        super().__init__(REQUEUE_EXIT_CODE)
        self.where = where

    def __str__(self) -> str:
        return f"stopped by signal {self.where}; exit {REQUEUE_EXIT_CODE} (requeue)"


class StopOnSignal:
    """Context manager: `requested` turns 1.0 once a stop signal arrived (handlers restored on exit).

    A signal latched before entry (see `latch_stop_signals`) counts as arrived."""

    def __init__(self) -> None:
        self.requested = 0.0
        self._previous: dict[int, object] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        _remember(signum)
        self.requested = 1.0

    def __enter__(self) -> StopOnSignal:
        for sig in STOP_SIGNALS:
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread (e.g. a notebook worker): no handlers
                break
        self.requested = 1.0 if stop_pending() else 0.0
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
