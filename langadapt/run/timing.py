"""Wall and CPU time per part of a stage, for the stage's manifest summary.

A stage that reports only its total wall time hides where the time goes (the tokenizer stage's
held-out metrics once cost as much as its training); a stage that reports wall time only hides
work done in worker processes. `PartTimer` records both for named parts: wall seconds from a
monotonic clock, and CPU seconds as user+sys of this process plus of its reaped children (pool
workers count once they have exited, which they have when a `with Pool(...)` block closes).
"""

from __future__ import annotations

import resource
import time
from collections.abc import Iterator
from contextlib import contextmanager


def cpu_seconds() -> float:
    """User+sys CPU seconds of this process and of its reaped children so far."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


class PartTimer:
    """Accumulates wall and CPU seconds per named part, in the order parts first ran.

    Usage::

        parts = PartTimer()
        with parts.measure("merges"):
            train(...)
        summary["parts"] = parts.as_dict()

    Measuring the same name twice adds up (a part run in several steps reports its total).
    Parts should not nest: a nested part's time would count in both.
    """

    def __init__(self) -> None:
        self._parts: dict[str, dict[str, float]] = {}

    @contextmanager
    def measure(self, name: str) -> Iterator[None]:
        """Time the block as part `name`; time is recorded even when the block raises."""
        wall0, cpu0 = time.perf_counter(), cpu_seconds()
        try:
            yield
        finally:
            part = self._parts.setdefault(name, {"wall_s": 0.0, "cpu_s": 0.0})
            part["wall_s"] += time.perf_counter() - wall0
            part["cpu_s"] += cpu_seconds() - cpu0

    def as_dict(self) -> dict[str, dict[str, float]]:
        """`{name: {"wall_s": s, "cpu_s": s}}`, rounded to 0.01 s, for a JSON manifest."""
        return {
            name: {key: round(value, 2) for key, value in part.items()}
            for name, part in self._parts.items()
        }
