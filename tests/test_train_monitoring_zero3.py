"""Validation under real multi-process DeepSpeed ZeRO-3 on CPU (torchrun, 2 ranks, gloo): every
rank runs the same forward passes over its share of the held-out windows while the weights are
partitioned, and the reduced numbers equal those of one plain process."""

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


def test_zero3_validation_on_two_ranks_equals_one_process(tmp_path: Path) -> None:
    single, sharded = tmp_path / "single", tmp_path / "zero3"
    mp.run([sys.executable, str(WORKER), str(single), "torch", "0"], tmp_path / "single.log")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone",
           str(WORKER), str(sharded), "deepspeed", "3"]
    mp.run(cmd, tmp_path / "zero3.log")
    alone, split = validation_rows(single), validation_rows(sharded)
    assert list(alone) == list(split) == [2, 4]
    for step in alone:
        assert split[step]["tokens"] == alone[step]["tokens"] == 9 * 16  # padding row never counted
        assert split[step]["loss"] == pytest.approx(alone[step]["loss"], rel=1e-5)
