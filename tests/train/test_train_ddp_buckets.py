"""The torch engine's DDP keeps one copy of the gradients: they are views into its all-reduce buckets.

By default DDP holds its buckets as a second copy of every gradient (the size of the fp32
gradients: 28 GB for 7B), which `plan`'s ZeRO-0 row does not count. On 2 CPU ranks
(tests/helpers/ddp_worker.py) the 21 gradients of a tiny Llama must live in the storage of its one
bucket, also after `zero_grad(set_to_none=True)` (measured without the setting: 21 storages).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import multiproc as mp

pytestmark = pytest.mark.slow


def test_ddp_gradients_are_bucket_views(tmp_path: Path) -> None:
    out = tmp_path / "run"
    mp.two_ranks(out, worker=mp.HELPERS / "ddp_worker.py")
    result = json.loads((out / "storages.json").read_text())
    assert result["params"] == 21
    assert result["storages"] == [1, 1]  # one bucket (25 MB cap), after both steps' backward
    # the losses DDP's copy-keeping default gave (the second step reads the first step's update);
    # 2e-3: CPU kernels differ slightly across instruction sets, as for the golden files
    assert result["losses"] == pytest.approx([9.1203, 9.1895], abs=2e-3)
