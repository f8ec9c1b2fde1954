"""Cluster presets for `langadapt launch`: what one node offers and what its collectives need.

Kept apart from the script writer so that adding a cluster is one entry here; the values for
LUMI-G come from the LUMI documentation (CPU masks per GCD, the Slingshot NICs, the container
and bind mounts of its PyTorch images), the NVIDIA ones are the plain 4- and 8-GPU node.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from langadapt.recipe.base import Config

PresetName = Literal["lumi-g", "nvidia-4", "nvidia-8"]


class ClusterPreset(Config):
    """What one node offers and what its collectives library needs; build one for other clusters."""

    name: str
    """Short name, shown in the script's header."""
    tasks_per_node: int = Field(ge=1)
    """srun tasks (= training processes) per node: one per GPU."""
    gpus_per_node: int = Field(0, ge=0)
    """GPUs requested per node (`--gpus-per-node`); 0 for CPU-only nodes."""
    cpus_per_task: int | None = Field(None, ge=1)
    """CPU cores per task (data-loader workers, OMP threads); None: leave to the site."""
    mem: str | None = None
    """Memory per node (`--mem`), e.g. "480G"; None: the partition's default."""
    partition: str | None = None
    """Default partition when none is given."""
    cpu_bind: str | None = None
    """srun `--cpu-bind` value; None: Slurm's default binding."""
    env: dict[str, str] = Field(default_factory=dict)
    """Variables exported before srun, each with the reason in `env_notes`."""
    env_notes: dict[str, str] = Field(default_factory=dict)
    """Why each variable in `env` is set (written as a comment next to it)."""
    setup_hint: list[str] = Field(default_factory=list)
    """Commented example lines for the EDIT block (modules, container, venv)."""
    run_prefix: str = ""
    """Default prefix of every langadapt command (shell syntax), e.g. run it in a container."""


# LUMI-G: 4 MI250X = 8 GCDs per node, 56 usable cores in 8 CCDs of 7 (first core of each CCD is
# reserved). GCD i is closest to the CCD in mask i below (from the LUMI docs); task i uses GCD i
# (LOCAL_RANK = SLURM_LOCALID), so binding task i to mask i keeps each rank on its own CCD.
_LUMI_MASKS = "fe000000000000,fe00000000000000,fe0000,fe000000,fe,fe00,fe00000000,fe0000000000"

PRESETS: dict[str, ClusterPreset] = {
    "lumi-g": ClusterPreset(
        name="lumi-g", tasks_per_node=8, gpus_per_node=8, cpus_per_task=7, mem="480G",
        partition="standard-g", cpu_bind=f"mask_cpu:{_LUMI_MASKS}",
        env={
            "NCCL_SOCKET_IFNAME": "hsn0,hsn1,hsn2,hsn3",
            "NCCL_NET_GDR_LEVEL": "PHB",
            "MIOPEN_USER_DB_PATH": "/tmp/$(id -un)-miopen-cache-${SLURM_JOB_ID}",
            "MIOPEN_CUSTOM_CACHE_DIR": "${MIOPEN_USER_DB_PATH}",
            "CXI_FORK_SAFE": "1", "CXI_FORK_SAFE_HP": "1", "FI_CXI_DISABLE_CQ_HUGETLB": "1",
            "OMP_NUM_THREADS": "7",
            "SINGULARITY_BIND": "${SINGULARITY_BIND:+$SINGULARITY_BIND,}/pfs,/scratch,/projappl,/project,/flash",
            "HF_HOME": "${HF_HOME:-/scratch/${SLURM_JOB_ACCOUNT}/${USER}/hf_home}",
        },
        env_notes={
            "NCCL_SOCKET_IFNAME": "RCCL over the four Slingshot NICs; otherwise it picks one it cannot use",
            "NCCL_NET_GDR_LEVEL": "GPU-direct RDMA between each GCD and its NIC (default from ROCm 6.2)",
            "MIOPEN_USER_DB_PATH": "MIOpen's kernel DB on node-local /tmp: on Lustre its file locks fail",
            "CXI_FORK_SAFE": "data-loader workers fork; the Slingshot provider must allow it",
            "SINGULARITY_BIND": "the container sees the Lustre file systems (recipe, corpus, runs/)",
            "HF_HOME": "Hub downloads on /scratch, not the 20 GB home; set HF_HOME to choose",
        },
        setup_hint=[
            "module load LUMI partition/G",
            "module use /appl/local/containers/ai-modules && module load singularity-AI-bindings"
            "   # Slingshot libraries for RCCL",
            "export LANGADAPT_SIF=/appl/local/containers/sif-images/<a lumi-pytorch-rocm image>.sif"
            "   # with langadapt pip-installed in it (or a venv on /project it can see)",
        ],
        # Empty LANGADAPT_SIF: no container, `langadapt` must be on PATH (the script checks).
        run_prefix="${LANGADAPT_SIF:+singularity exec $LANGADAPT_SIF}",
    ),
    **{
        f"nvidia-{g}": ClusterPreset(
            name=f"nvidia-{g}", tasks_per_node=g, gpus_per_node=g, cpus_per_task=cpus,
            env={"OMP_NUM_THREADS": "${SLURM_CPUS_PER_TASK}", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"},
            env_notes={"TORCH_NCCL_ASYNC_ERROR_HANDLING": "a failed collective aborts the job, no silent hang"},
            setup_hint=[
                "module load 2024 Python/3.12.3-GCCcore-13.3.0   # Snellius; your site's modules",
                "source $HOME/venvs/langadapt/bin/activate",
            ],
        )
        for g, cpus in ((4, 16), (8, 12))
    },
}
"""Built-in presets: LUMI-G (AMD MI250X, RCCL) and NVIDIA nodes with 4 or 8 GPUs (NCCL)."""
