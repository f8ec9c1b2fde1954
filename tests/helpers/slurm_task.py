"""A tiny task for the real-Slurm tests, run by a generated sbatch script under srun.

The generated script runs `COMMAND RECIPE RUN_ARGS...`: the recipe is ignored here.

    slurm_task.py allreduce RECIPE OUT_DIR   each rank writes rank-<r>.json with its DistInfo
                                             and the gloo all-reduce of (rank + 1)
    slurm_task.py requeue RECIPE OUT_DIR     first run: wait for SIGUSR1 (forwarded by the
                                             script from Slurm's time-limit warning), write
                                             got-usr1-<r>, exit REQUEUE_EXIT_CODE; after the
                                             requeue (SLURM_RESTART_COUNT >= 1): resumed-<r>
"""

from __future__ import annotations

import signal

# First thing, before the slow imports: Slurm's warning may come seconds after the job starts,
# and an unhandled SIGUSR1 kills the process.
_GOT: list[int] = []
signal.signal(signal.SIGUSR1, lambda signum, frame: _GOT.append(signum))

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from langadapt.train.distributed import REQUEUE_EXIT_CODE, DistInfo, destroy, init_distributed


def allreduce(out: Path) -> None:
    info = init_distributed(DistInfo.from_env())
    value = torch.tensor([float(info.rank + 1)])
    dist.all_reduce(value)
    record = {**dataclasses.asdict(info), "allreduce": value.item(), "device": str(info.device())}
    (out / f"rank-{info.rank}.json").write_text(json.dumps(record))
    destroy()


def requeue(out: Path) -> None:
    info = DistInfo.from_env()
    if int(os.environ.get("SLURM_RESTART_COUNT", "0")) >= 1:
        (out / f"resumed-{info.rank}").write_text("ok")
        return
    (out / f"started-{info.rank}").write_text(str(time.time()))
    deadline = time.time() + 300
    while not _GOT and time.time() < deadline:
        time.sleep(0.1)
    (out / f"got-usr1-{info.rank}").write_text(str(bool(_GOT)))
    sys.exit(REQUEUE_EXIT_CODE if _GOT else 3)


if __name__ == "__main__":
    mode, out_dir = sys.argv[1], Path(sys.argv[-1])  # the recipe path sits between them
    out_dir.mkdir(parents=True, exist_ok=True)
    {"allreduce": allreduce, "requeue": requeue}[mode](out_dir)
