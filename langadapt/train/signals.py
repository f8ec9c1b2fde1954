"""Stopping cleanly when the scheduler asks: SIGTERM / SIGUSR1 -> checkpoint -> requeue exit code.

Slurm sends SIGTERM at the time limit (and, with `#SBATCH --signal=USR1@120`, SIGUSR1 two
minutes before it); torchrun forwards SIGTERM to its workers. The handler only sets a flag: the
loop finishes the step it is in, all ranks agree on the flag, write a complete checkpoint, and
the process exits with `REQUEUE_EXIT_CODE`. The launcher's sbatch script treats that code as
"requeue me" (`scontrol requeue $SLURM_JOB_ID`), and the requeued job resumes from the
checkpoint because `langadapt run` always resumes from the latest complete one.
"""

from __future__ import annotations

import logging
import signal
from types import FrameType, TracebackType

from langadapt.train.distributed import REQUEUE_EXIT_CODE  # 75 (EX_TEMPFAIL): "requeue me"

log = logging.getLogger("langadapt.train")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class Preempted(SystemExit):
    """Raised after the stop checkpoint is written; SystemExit so no stage is marked complete
    and `except Exception` handlers let it through to the exit code."""

    def __init__(self, step: int, checkpoint: str) -> None:
        super().__init__(REQUEUE_EXIT_CODE)
        self.step, self.checkpoint = step, checkpoint

    def __str__(self) -> str:
        return f"stopped by signal at step {self.step}; checkpoint {self.checkpoint}; exit {REQUEUE_EXIT_CODE} (requeue)"


class StopOnSignal:
    """Context manager: `requested` turns 1.0 once a stop signal arrived (handlers restored on exit)."""

    def __init__(self) -> None:
        self.requested = 0.0
        self._previous: dict[int, object] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if not self.requested:
            log.warning("received %s: checkpointing at the end of this step, then exiting %d",
                        signal.Signals(signum).name, REQUEUE_EXIT_CODE)
        self.requested = 1.0

    def __enter__(self) -> StopOnSignal:
        for sig in STOP_SIGNALS:
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread (e.g. a notebook worker): no handlers
                break
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
