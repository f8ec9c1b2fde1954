"""PartTimer: wall and CPU seconds per named part, children included."""

from __future__ import annotations

import multiprocessing

import pytest

from langadapt.run.timing import PartTimer


def _burn(n: int) -> int:
    return sum(i * i for i in range(n))


def test_parts_in_order_rounded_and_accumulated() -> None:
    parts = PartTimer()
    with parts.measure("b"):
        _burn(200_000)
    with parts.measure("a"):
        pass
    with parts.measure("b"):
        _burn(200_000)
    out = parts.as_dict()
    assert list(out) == ["b", "a"]
    assert set(out["b"]) == {"wall_s", "cpu_s"}
    assert out["b"]["cpu_s"] > 0 and out["b"]["wall_s"] > 0
    assert all(round(v, 2) == v for part in out.values() for v in part.values())


def test_time_recorded_when_block_raises() -> None:
    parts = PartTimer()
    with pytest.raises(ValueError), parts.measure("x"):
        raise ValueError("boom")
    assert "x" in parts.as_dict()


def test_reaped_children_count_in_cpu() -> None:
    parts = PartTimer()
    with parts.measure("pool"):
        ctx = multiprocessing.get_context("spawn")
        proc = ctx.Process(target=_burn, args=(3_000_000,))
        proc.start()
        proc.join()
    out = parts.as_dict()["pool"]
    # the parent only waited: nearly all CPU is the child's, which must be counted
    assert out["cpu_s"] >= 0.1
