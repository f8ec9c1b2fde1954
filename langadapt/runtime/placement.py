"""Who am I in the job: rank, world and rendezvous read from whichever launcher started us.

The one place that decides this process's placement: the pipeline (rank 0 holds the run lock,
only training is multi-rank), the logger (`[rank r]`), preflight (the global batch) and the
process group (`distributed.init_distributed`) all read `DistInfo.from_env()`; before this each
read RANK/SLURM_PROCID itself and one of them took an sbatch batch shell for rank 0 of N.

The same `langadapt run RECIPE` works under `torchrun`, the `deepspeed` launcher, `mpirun`
(OpenMPI) and Slurm `srun`, because every launcher leaves the answer in environment variables.
Reading is pure (`DistInfo.from_env(env)` takes any mapping) so every launcher's layout is
unit-tested without launching anything, and imports no torch (the CLI logs before loading it).

Precedence, first match wins:
1. `RANK` + `WORLD_SIZE` (torchrun, deepspeed launcher, or a hand-written script that exports
   them, as our sbatch scripts do not: they leave rank to srun);
2. `OMPI_COMM_WORLD_RANK` (deepspeed `--launcher openmpi`, plain mpirun);
3. `SLURM_PROCID` inside an srun job step (`in_slurm_task`). The batch shell of an sbatch job
   also has `SLURM_PROCID=0` and `SLURM_NTASKS=N` (and, on some Slurm versions, the batch step's
   id in `SLURM_STEP_ID`), but it is not one of the N tasks: a process started there directly
   (no srun), like the generated script's data..embeddings step, is a single process instead of
   waiting forever for N-1 peers that never come;
4. nothing: a single process.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from langadapt.errors import LangadaptError
from langadapt.runtime.hostlist import (
    SLURM_PORT_BASE,
    SLURM_PORT_SPAN,
    expand_nodelist,
    expand_tasks_per_node,
)

if TYPE_CHECKING:
    import torch

SLURM_SHELL_STEPS = {"4294967290", "4294967291", "4294967292", "interactive", "batch", "extern"}
"""Step ids of Slurm's non-srun steps (SLURM_INTERACTIVE_STEP, SLURM_BATCH_SCRIPT and
SLURM_EXTERN_CONT: 0xfffffffa..c): a shell or a container, one process, never rank k of n."""


def in_slurm_task(env: Mapping[str, str]) -> bool:
    """True in a task of an srun step; False in the batch shell, an salloc shell or outside Slurm."""
    step = env.get("SLURM_STEP_ID", env.get("SLURM_STEPID"))
    return step is not None and step.strip() not in SLURM_SHELL_STEPS


DEFAULT_MASTER_PORT = 29500
"""torchrun's default rendezvous port, used when nothing else names one."""

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
        elif "SLURM_PROCID" in env and in_slurm_task(env):
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
        import torch

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


def training_world_size(default: int, env: Mapping[str, str] | None = None) -> int:
    """How many ranks the training stages will run on, as seen from this process.

    A rank of a launched job: its world. The batch shell of an sbatch job (one process itself):
    the job's task count, which the script's srun of the training stages will use. Elsewhere
    (a laptop, a login node): `default`, the recipe's planned cluster."""
    env = os.environ if env is None else env
    info = DistInfo.from_env(env)
    if info.launcher != "none":
        return info.world_size
    return _int(env, "SLURM_NTASKS", "SLURM_NPROCS", default=default) if "SLURM_JOB_ID" in env else default
