"""Who am I in the job: rank, world and rendezvous read from whichever launcher started us.

The same `langadapt run RECIPE` works under `torchrun`, the `deepspeed` launcher, `mpirun`
(OpenMPI) and Slurm `srun`, because every launcher leaves the answer in environment variables;
this module reads them into one `DistInfo` and starts the process group from it. Reading is
pure (`DistInfo.from_env(env)` takes any mapping) so every launcher's layout is unit-tested
without launching anything.

Precedence, first match wins:
1. `RANK` + `WORLD_SIZE` (torchrun, deepspeed launcher, or a hand-written script that exports
   them, as our sbatch scripts do not: they leave rank to srun);
2. `OMPI_COMM_WORLD_RANK` (deepspeed `--launcher openmpi`, plain mpirun);
3. `SLURM_PROCID` inside a job step (`SLURM_STEP_ID` set). The batch shell of an sbatch job also
   has `SLURM_PROCID=0` and `SLURM_NTASKS=N`, but it is not one of the N tasks: a process started
   there directly (no srun) is treated as a single process instead of waiting forever for N-1
   peers that never come;
4. nothing: a single process.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import timedelta

import torch
import torch.distributed as dist

from langadapt.errors import LangadaptError
from langadapt.train.hostlist import SLURM_PORT_BASE, SLURM_PORT_SPAN, expand_nodelist, expand_tasks_per_node

DEFAULT_MASTER_PORT = 29500
"""torchrun's default rendezvous port, used when nothing else names one."""

EXPORTED_ENV_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_SIZE")
"""What `export_env` writes into this process's environment. A child process started later
inherits them, and would read its parent's place in the job (and its rendezvous port, still held
by the parent's store) as its own: strip them from a child's environment unless it joins the job."""


@dataclass(frozen=True)
class DistInfo:
    """This process's place in the job, as the launcher described it."""

    rank: int = 0
    """Global rank, 0..world_size-1."""
    local_rank: int = 0
    """Rank among the processes on this node; picks the GPU (`cuda:{local_rank}`)."""
    world_size: int = 1
    """Number of processes in the job."""
    local_world_size: int = 1
    """Number of processes on this node."""
    node_rank: int = 0
    """Index of this node among the job's nodes."""
    master_addr: str = "127.0.0.1"
    """Host of rank 0, where the rendezvous store listens."""
    master_port: int = DEFAULT_MASTER_PORT
    """Port of the rendezvous store."""
    backend: str | None = None
    """torch.distributed backend ("nccl" on CUDA and ROCm, "gloo" on CPU); None: not chosen yet."""
    launcher: str = "none"
    """Where the values came from: torchrun, deepspeed, env, mpi, slurm or none."""

    @property
    def distributed(self) -> bool:
        """More than one process: collectives are needed."""
        return self.world_size > 1

    @property
    def num_nodes(self) -> int:
        """Nodes in the job, assuming the same number of processes on each (all launchers do)."""
        return max(1, self.world_size // max(1, self.local_world_size))

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that writes shared files and logs."""
        return self.rank == 0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> DistInfo:
        """Read the launcher's variables (default: `os.environ`); see the module docstring."""
        env = os.environ if env is None else env
        if "RANK" in env and "WORLD_SIZE" in env:
            info = _from_torch_env(env)
        elif "OMPI_COMM_WORLD_RANK" in env:
            info = _from_openmpi(env)
        elif "SLURM_PROCID" in env and ("SLURM_STEP_ID" in env or "SLURM_STEPID" in env):
            info = _from_slurm(env)
        else:
            info = cls(launcher="none")
        info = replace(info, backend=env.get("LANGADAPT_DIST_BACKEND") or None)
        info.validate()
        return info

    def validate(self) -> None:
        """Refuse impossible layouts now rather than hang at the rendezvous."""
        if not 0 <= self.rank < self.world_size:
            raise LangadaptError(f"rank {self.rank} outside world size {self.world_size} ({self.launcher} env)")
        if not 0 <= self.local_rank < self.local_world_size:
            raise LangadaptError(
                f"local rank {self.local_rank} outside local world size {self.local_world_size} "
                f"({self.launcher} env)"
            )
        if not 0 < self.master_port < 65536:
            raise LangadaptError(f"MASTER_PORT {self.master_port} is not a valid port ({self.launcher} env)")

    def device(self) -> torch.device:
        """`cuda:{local_rank}` when GPUs are visible (ROCm builds answer torch.cuda too), else cpu.

        When the launcher already narrowed visibility to one GPU per task (CUDA_VISIBLE_DEVICES or
        ROCR_VISIBLE_DEVICES set per task, `srun --gpus-per-task=1`), that one GPU is device 0.
        """
        if not torch.cuda.is_available():
            return torch.device("cpu")
        return torch.device("cuda", self.local_rank % torch.cuda.device_count())


def _int(env: Mapping[str, str], *names: str, default: int | None = None) -> int:
    """The first of `names` present in env, as an int; the error names the variable."""
    for name in names:
        if name in env and env[name] != "":
            try:
                return int(env[name])
            except ValueError:
                raise LangadaptError(f"environment variable {name}={env[name]!r} is not an integer") from None
    if default is None:
        raise LangadaptError(f"environment variable {names[0]} is not set (needed to place this process)")
    return default


def _from_torch_env(env: Mapping[str, str]) -> DistInfo:
    """torchrun (TORCHELASTIC_*, GROUP_RANK) or the deepspeed launcher (LOCAL_SIZE, CROSS_RANK)."""
    world = _int(env, "WORLD_SIZE")
    local_world = _int(env, "LOCAL_WORLD_SIZE", "LOCAL_SIZE", default=world)
    if "TORCHELASTIC_RUN_ID" in env or "GROUP_RANK" in env:
        launcher = "torchrun"
    elif "CROSS_RANK" in env or "LOCAL_SIZE" in env:
        launcher = "deepspeed"
    else:
        launcher = "env"
    rank = _int(env, "RANK")
    return DistInfo(
        rank=rank,
        local_rank=_int(env, "LOCAL_RANK", default=rank % local_world),
        world_size=world,
        local_world_size=local_world,
        node_rank=_int(env, "GROUP_RANK", "CROSS_RANK", "NODE_RANK", default=rank // local_world),
        master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
        master_port=_int(env, "MASTER_PORT", default=DEFAULT_MASTER_PORT),
        launcher=launcher,
    )


def _from_openmpi(env: Mapping[str, str]) -> DistInfo:
    """mpirun / deepspeed --launcher openmpi; rendezvous must come from MASTER_ADDR/PORT (-x)."""
    world = _int(env, "OMPI_COMM_WORLD_SIZE")
    local_world = _int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", default=world)
    rank = _int(env, "OMPI_COMM_WORLD_RANK")
    return DistInfo(
        rank=rank,
        local_rank=_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", default=rank % local_world),
        world_size=world,
        local_world_size=local_world,
        node_rank=_int(env, "OMPI_COMM_WORLD_NODE_RANK", default=rank // local_world),
        master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
        master_port=_int(env, "MASTER_PORT", default=DEFAULT_MASTER_PORT),
        launcher="mpi",
    )


def _from_slurm(env: Mapping[str, str]) -> DistInfo:
    """srun task: step-level variables first (a step may use fewer tasks than the job)."""
    world = _int(env, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS")
    node = _int(env, "SLURM_NODEID", default=0)
    per_node = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
    if per_node:
        counts = expand_tasks_per_node(per_node)
        local_world = counts[node] if node < len(counts) else counts[-1]
    else:
        local_world = _int(env, "SLURM_NTASKS_PER_NODE", default=world)
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    master = env.get("MASTER_ADDR") or (expand_nodelist(nodelist)[0] if nodelist else "127.0.0.1")
    return DistInfo(
        rank=_int(env, "SLURM_PROCID"),
        local_rank=_int(env, "SLURM_LOCALID", default=0),
        world_size=world,
        local_world_size=local_world,
        node_rank=node,
        master_addr=master,
        master_port=_int(env, "MASTER_PORT", default=slurm_master_port(env.get("SLURM_JOB_ID"))),
        launcher="slurm",
    )


def slurm_master_port(job_id: str | None) -> int:
    """A port derived from the job id, so two jobs sharing a node do not collide on 29500.

    The generated sbatch scripts export the same value as MASTER_PORT.
    """
    if not job_id or not job_id.isdigit():
        return DEFAULT_MASTER_PORT
    return SLURM_PORT_BASE + int(job_id) % SLURM_PORT_SPAN


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
    kwargs = {} if timeout is None else {"timeout": timeout}
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
