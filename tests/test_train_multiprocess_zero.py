"""Real multi-process DeepSpeed on CPU: `torchrun --nproc_per_node 2`, gloo, ZeRO-2 and ZeRO-3.

Each run goes through the real training loop (`langadapt.train.loop.fit`, via
tests/helpers/fit_worker.py) on a tiny Llama, with the global batch split over the ranks. The
losses and final weights must match a single plain process within the tolerances stated in
tests/helpers/multiproc.py (fp32 reduction order; measured ~1e-7 on losses, ~1e-6 on weights).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import multiproc as mp

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("single") / "run"
    mp.single(out, "--zero", "2")
    return out


@pytest.mark.parametrize("zero", [2, 3])
def test_two_ranks_match_one_process(zero: int, reference: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    mp.two_ranks(out, "--zero", str(zero))
    infos = mp.dist_infos(out)
    assert [(i["rank"], i["world_size"], i["launcher"]) for i in infos] == [(0, 2, "torchrun"), (1, 2, "torchrun")]
    mp.assert_losses_close(mp.losses(out), mp.losses(reference))
    assert mp.max_weight_diff(mp.weights(out), mp.weights(reference)) <= mp.WEIGHT_ATOL
