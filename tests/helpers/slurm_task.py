"""Tasks for the real-Slurm tests, run by a generated sbatch script under srun.

The generated script runs `COMMAND RECIPE RUN_ARGS...`: the recipe is ignored here.

    slurm_task.py allreduce RECIPE OUT_DIR   each rank writes rank-<r>.json with its DistInfo
                                             and the gloo all-reduce of (rank + 1)
    slurm_task.py fit RECIPE OUT_DIR         the real training loop (fit_worker.train, DeepSpeed
                                             ZeRO-2) over srun's ranks; slow steps on the first
                                             run so Slurm's time-limit warning lands mid-run,
                                             full speed after the requeue (SLURM_RESTART_COUNT)
    slurm_task.py wait RECIPE OUT_DIR        write started-<r>, then wait; SIGTERM exits with the
                                             requeue code, as the training loop does
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import time
from pathlib import Path

from langadapt.runtime.signals import latch_stop_signals

# First thing, before the slow imports, as `langadapt run` does: Slurm's warning may come seconds
# after the job starts, before `fit` has installed its own handler, and an unhandled SIGUSR1
# kills the process. A latched signal stops the loop after its first step.
latch_stop_signals()

import fit_worker  # tests/helpers is this script's sys.path[0]
import torch
import torch.distributed as dist

from langadapt.runtime.distributed import DistInfo, destroy, init_distributed
from langadapt.runtime.signals import REQUEUE_EXIT_CODE


def allreduce(out: Path) -> None:
    info = init_distributed(DistInfo.from_env())
    value = torch.tensor([float(info.rank + 1)])
    dist.all_reduce(value)
    record = {**dataclasses.asdict(info), "allreduce": value.item(), "device": str(info.device())}
    (out / f"rank-{info.rank}.json").write_text(json.dumps(record))
    destroy()


def wait(out: Path) -> None:
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
    rank = DistInfo.from_env().rank
    (out / f"started-{rank}").write_text("ok")
    deadline = time.time() + 120
    while not stop and time.time() < deadline:
        time.sleep(0.1)
    sys.exit(REQUEUE_EXIT_CODE if stop else 0)


def fit(out: Path) -> None:
    first_run = os.environ.get("SLURM_RESTART_COUNT", "0") == "0"
    # 100 steps at 0.5 s outlast the one-minute limit, so the warning always comes mid-run; the
    # only checkpoints are the signal's and the final one.
    fit_worker.train(out, steps=100, save_every=1000, step_sleep=0.5 if first_run else 0.0)


if __name__ == "__main__":
    mode, out_dir = sys.argv[1], Path(sys.argv[-1])  # the recipe path sits between them
    out_dir.mkdir(parents=True, exist_ok=True)
    {"allreduce": allreduce, "fit": fit, "wait": wait}[mode](out_dir)
