"""The process group: started from this process's placement (`runtime.placement.DistInfo`).

Which rank and world this process has is decided in `placement` (torch-free, read by the CLI,
the logger and the pipeline too); this module turns that answer into a torch.distributed or
DeepSpeed process group (`export_env` writes its layout into this process's environment for the
libraries that read it there).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta

import torch
import torch.distributed as dist

from langadapt.errors import LangadaptError
from langadapt.runtime.placement import DistInfo

TIMEOUT_ENV = "LANGADAPT_DIST_TIMEOUT_S"
"""Seconds a collective may wait for a peer before the process fails (see `collective_timeout`)."""

DEFAULT_TIMEOUT_S = 600.0
"""Ten minutes: longer than anything rank 0 does alone between collectives (publishing and pruning
a checkpoint, exporting the model), far shorter than torch's gloo default of 30 minutes, which a
job whose peer froze (a node off the network: no TCP reset) would spend holding every GPU."""

def collective_timeout(env: Mapping[str, str] | None = None) -> timedelta:
    """How long a collective waits for a missing peer: `LANGADAPT_DIST_TIMEOUT_S`, else ten minutes.

    A peer that dies outright is noticed at once (its sockets close; torchrun then stops the
    others); this bounds the other case, a peer that stops answering. The fault tests set it
    to seconds."""
    env = os.environ if env is None else env
    raw = env.get(TIMEOUT_ENV, "")
    try:
        seconds = float(raw) if raw else DEFAULT_TIMEOUT_S
    except ValueError:
        raise LangadaptError(f"environment variable {TIMEOUT_ENV}={raw!r} is not a number of seconds") from None
    if seconds <= 0:
        raise LangadaptError(f"environment variable {TIMEOUT_ENV}={raw!r} must be positive")
    return timedelta(seconds=seconds)


def default_backend() -> str:
    """nccl when a GPU is visible (on ROCm builds "nccl" is RCCL under the same name), else gloo."""
    return "nccl" if torch.cuda.is_available() else "gloo"


def free_port() -> int:
    """An unused local port, for single-process runs that still need a process group (DeepSpeed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def export_env(info: DistInfo) -> None:
    """Write the torch env:// variables for `info`, so every library reading them agrees.

    Under srun or mpirun nothing has set RANK/WORLD_SIZE yet; DeepSpeed would otherwise go looking
    for mpi4py. LOCAL_SIZE is DeepSpeed's CPU accelerator's "devices per node" (ZeRO-3 uses it
    to size its node-local groups); without it DeepSpeed counts NUMA nodes instead.
    """
    os.environ.update(
        RANK=str(info.rank),
        LOCAL_RANK=str(info.local_rank),
        WORLD_SIZE=str(info.world_size),
        LOCAL_WORLD_SIZE=str(info.local_world_size),
        MASTER_ADDR=info.master_addr,
        MASTER_PORT=str(info.master_port),
    )
    if not torch.cuda.is_available():
        os.environ.setdefault("LOCAL_SIZE", str(info.local_world_size))


def init_distributed(
    info: DistInfo | None = None,
    backend: str | None = None,
    *,
    use_deepspeed: bool = False,
    timeout: timedelta | None = None,
) -> DistInfo:
    """Start the process group described by `info` (default: read from the environment).

    Backend: the argument, else `info.backend` (LANGADAPT_DIST_BACKEND), else nccl on GPUs (CUDA
    and ROCm) and gloo on CPU. With `use_deepspeed` the group is started through
    `deepspeed.init_distributed` (its comm layer must own the group) and is started even for one
    process, which DeepSpeed's engine requires; a lone process then gets a free local port so two
    single-process runs on one machine do not collide. Idempotent: an existing group is kept.
    `timeout` (default: `collective_timeout()`) bounds every collective's wait for a peer.
    Returns `info` with the backend and port actually used.
    """
    info = info or DistInfo.from_env()
    info = replace(info, backend=backend or info.backend or default_backend())
    if info.launcher == "none" and use_deepspeed and "MASTER_PORT" not in os.environ:
        info = replace(info, master_port=free_port())
    if info.device().type == "cuda":
        # Before the first collective: NCCL binds its communicator to the current device.
        torch.cuda.set_device(info.device())
    if dist.is_initialized() or not (info.distributed or use_deepspeed):
        return info
    export_env(info)
    timeout = timeout or collective_timeout()
    _bound_later_groups(timeout)
    kwargs = {"timeout": timeout}
    if use_deepspeed:
        import deepspeed

        if info.device().type == "cpu":
            _skip_deepspeed_shm_comm()
        deepspeed.init_distributed(
            dist_backend=info.backend,
            auto_mpi_discovery=False,
            distributed_port=info.master_port,
            rank=info.rank,
            world_size=info.world_size,
            **kwargs,
        )
    else:
        dist.init_process_group(info.backend, rank=info.rank, world_size=info.world_size, **kwargs)
    return info


def _bound_later_groups(timeout: timedelta) -> None:
    """Give groups created later (DeepSpeed's data-parallel and ZeRO groups) the same timeout.

    `torch.distributed.new_group` without a timeout does not inherit the world group's: it takes
    c10d's module defaults (30 min gloo, 10 min NCCL). A ZeRO-2 run whose peer froze then waited
    30 minutes in a gradient reduce although the world group had a 10 s timeout
    (tests/train/test_train_multiprocess_faults.py); those defaults are what c10d reads, so set them.
    """
    import torch.distributed.distributed_c10d as c10d

    c10d.default_pg_timeout = timeout
    c10d.default_pg_nccl_timeout = timeout


def is_main() -> bool:
    """Rank 0 of the running group, or of the launcher's layout before the group exists."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank() == 0
    return DistInfo.from_env().rank == 0


def barrier() -> None:
    """Wait for every rank; a no-op in a single process, so callers need no `if distributed`."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def destroy() -> None:
    """Tear the group down (lets a process start a new one, and avoids NCCL's exit warnings)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _skip_deepspeed_shm_comm() -> None:
    """Keep DeepSpeed on CPU from JIT-compiling its shared-memory all-reduce; gloo does the job.

    Its comm layer builds that C++ op the first time on every machine: it needs a compiler and
    ninja, costs a minute, and waits forever on the lock file an interrupted build leaves behind.
    CPU runs here are tests and demos, where the gain is nil. Marking the op incompatible is
    the switch DeepSpeed itself consults (`deepspeed.comm.torch.build_shm_op`).
    """
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
