"""The same training command under the `deepspeed` launcher (`--no_local_rank`, 2 CPU ranks).

torchrun and srun are covered by test_train_multiprocess_*.py and test_train_launch_slurm.py;
here the deepspeed launcher's environment (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_SIZE,
CROSS_RANK) is read by DistInfo and the run matches a single process within the multi-rank
tolerances of tests/helpers/multiproc.py. On CPU the launcher needs `numactl`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import fit_worker
from helpers import multiproc as mp

from langadapt.runtime.distributed import free_port

pytestmark = pytest.mark.slow


@pytest.mark.skipif(shutil.which("deepspeed") is None, reason="the deepspeed launcher is not on PATH")
@pytest.mark.skipif(shutil.which("numactl") is None, reason="the deepspeed launcher needs numactl on CPU")
def test_deepspeed_launcher_two_ranks(tmp_path: Path) -> None:
    out, reference = tmp_path / "ds", tmp_path / "reference"
    cmd = ["deepspeed", "--num_gpus", "2", "--master_port", str(free_port()), "--no_local_rank",
           str(mp.WORKER), str(out), "--zero", "2", "--steps", "6"]
    mp.run(cmd, out.with_suffix(".log"))
    infos = mp.dist_infos(out)
    assert [(i["rank"], i["local_rank"], i["local_world_size"], i["launcher"]) for i in infos] == [
        (0, 0, 2, "deepspeed"), (1, 1, 2, "deepspeed")]
    fit_worker.train(reference, engine="torch", steps=6)  # in this process: same AdamW maths
    mp.assert_losses_close(mp.losses(out), mp.losses(reference))
    assert mp.max_weight_diff(mp.weights(out), mp.weights(reference)) <= mp.WEIGHT_ATOL
