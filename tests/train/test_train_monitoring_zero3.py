"""Validation under real multi-process sharded engines on CPU (torchrun, 2 ranks, gloo): DeepSpeed
ZeRO-3 and FSDP2. Every rank runs the same forward passes over its share of the held-out windows
while the weights are partitioned, and the reduced numbers equal those of one plain process."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers import multiproc as mp

pytestmark = pytest.mark.slow

WORKER = mp.HELPERS / "validate_worker.py"


def validation_rows(out: Path) -> dict[int, dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {row["step"]: row["valid"]["xx"] for row in rows if "valid" in row}


@pytest.mark.parametrize(("engine", "zero"), [("deepspeed", "3"), ("fsdp", "0")])
def test_sharded_validation_on_two_ranks_equals_one_process(tmp_path: Path, engine: str, zero: str) -> None:
    single, sharded = tmp_path / "single", tmp_path / engine
    mp.run([sys.executable, str(WORKER), str(single), "torch", "0"], tmp_path / "single.log")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone",
           str(WORKER), str(sharded), engine, zero]
    mp.run(cmd, tmp_path / f"{engine}.log")
    alone, split = validation_rows(single), validation_rows(sharded)
    assert list(alone) == list(split) == [2, 4]
    for step in alone:
        assert split[step]["tokens"] == alone[step]["tokens"] == 9 * 16  # padding row never counted
        assert split[step]["loss"] == pytest.approx(alone[step]["loss"], rel=1e-5)
