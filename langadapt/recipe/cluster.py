"""The planner's slice of the recipe: the machines stage 2 is planned and launched for.

`hardware` and `grid` are validated by the same functions `langadapt plan` reads them with
(`recipe.hardware`), so a recipe that loads is a recipe that plans. `preparation` is the CPU job
that runs the data, tokenizer and embeddings stages before the GPU job (`langadapt launch`), and
whose core-hours and wall time `langadapt plan` shows.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator

from langadapt.errors import LangadaptError
from langadapt.recipe.base import Config, FieldProblem
from langadapt.recipe.hardware import get_hardware, grid_intensity

_SLURM_TIME = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")
_SLURM_MEM = re.compile(r"\d+[KMGT]?")


def slurm_time_seconds(spec: str) -> int:
    """Seconds in a Slurm time limit ("90", "1:30:00", "2-00:00:00", "1-12")."""
    m = _SLURM_TIME.fullmatch(spec.strip())
    if not m:
        raise LangadaptError(f"launch time: {spec!r} is not a Slurm time (MM, HH:MM:SS or D-HH:MM:SS)")
    days, a, b, c = (int(x) if x else None for x in m.groups())
    if days is not None:  # D-HH, D-HH:MM, D-HH:MM:SS
        return days * 86400 + a * 3600 + (b or 0) * 60 + (c or 0)  # type: ignore[operator]
    if c is not None:  # HH:MM:SS
        return a * 3600 + b * 60 + c  # type: ignore[operator]
    return a * 60 + (b or 0)  # type: ignore[operator]  # MM or MM:SS


class PreparationConfig(Config):
    """The CPU job that prepares the data before training (`langadapt launch --slurm`): the data,
    tokenizer and embeddings stages on one CPU node, so that no GPU waits on them."""

    partition: str | None = None
    """CPU partition of every preparation job (the one-node job, or datatrove's with `data.datatrove.executor:
    slurm`, whose own `partition` may only repeat it); None: `data.datatrove.partition` if set, else the
    launch preset's (lumi-g: `standard`, LUMI-C), else the site's default."""
    account: str | None = None
    """Account/project charged for every preparation job (datatrove's too); None:
    `data.datatrove.sbatch_args.account` if set, else the training job's (`launch --account`)."""
    cpus: int = Field(128, ge=1, le=4096)
    """Cores of the node it asks for (`--cpus-per-task`), all used by the data stage (128: LUMI-C, Snellius rome)."""
    mem: str | None = None
    """Memory (`--mem`, e.g. "224G"); None: all of the node's (`--mem=0`)."""
    time: str = "2-00:00:00"
    """Wall-time limit, Slurm syntax (2 days: the most LUMI's CPU partitions allow); `plan` warns past it."""

    @field_validator("time", mode="before")
    @classmethod
    def _quoted_time(cls, time: object) -> object:
        """YAML 1.1 reads an unquoted 6:00:00 as the number 21600 (base 60): as Slurm minutes that
        would be 15 days, so a number is refused rather than guessed at."""
        if isinstance(time, (int, float)) and not isinstance(time, bool):
            raise ValueError(  # noqa: TRY004 (pydantic reports ValueError as a field error, not TypeError)
                f"{time:g} is a number (YAML reads an unquoted 6:00:00 as 21600): quote the time, e.g. '6:00:00'")
        return time

    @field_validator("time")
    @classmethod
    def _slurm_time(cls, time: str) -> str:
        try:
            slurm_time_seconds(time)
        except LangadaptError:
            raise ValueError(f"{time!r} is not a Slurm time (MM, HH:MM:SS or D-HH:MM:SS)") from None
        return time

    @field_validator("mem")
    @classmethod
    def _slurm_mem(cls, mem: str | None) -> str | None:
        if mem is not None and not _SLURM_MEM.fullmatch(mem):
            raise ValueError(f"{mem!r} is not a Slurm memory size (a number with K, M, G or T, e.g. 224G)")
        return mem

    @property
    def time_seconds(self) -> int:
        return slurm_time_seconds(self.time)


PREPARATION_TARGET = ("partition", "account")
"""What every preparation job shares, whoever submits it (`launch`'s one-node job or datatrove's jobs)."""


def preparation_target(preparation: PreparationConfig, datatrove: Any) -> dict[str, str | None]:
    """Partition and account of every preparation job, one source of truth: `cluster.preparation`.

    `data.datatrove` may spell them too (`partition`, `sbatch_args.partition`, `sbatch_args.account`,
    as datatrove's executor takes them): read only where `cluster.preparation` leaves the key unset
    (None: the launch preset's CPU partition and `--account`, else the site's defaults). A second
    spelling that differs from the first is a FieldProblem at its key (relative to the recipe), never
    a silent choice. `datatrove`: the recipe's `data.datatrove` (a DatatroveConfig)."""
    target: dict[str, str | None] = {}
    for key in PREPARATION_TARGET:
        spellings = [(("cluster", "preparation", key), getattr(preparation, key))]
        spellings += [(("data", "datatrove", key), datatrove.partition)] if key == "partition" else []
        spellings += [(("data", "datatrove", "sbatch_args", key), datatrove.sbatch_args.get(key))]
        given = [(loc, value) for loc, value in spellings if value is not None]
        for loc, value in given[1:]:
            if value != given[0][1]:
                first = ".".join(given[0][0])
                raise FieldProblem(loc, f"{value!r} differs from {first} {given[0][1]!r}: every preparation job has "
                                        f"one {key}; set it once, in cluster.preparation.{key} (the datatrove jobs "
                                        "take it from there)")
        target[key] = given[0][1] if given else None
    return target


class ClusterConfig(Config):
    """Where stage 2 runs: used by `langadapt plan` (world size, hardware) and `langadapt launch`."""

    nodes: int = Field(1, ge=1, le=100_000)
    """Number of nodes."""
    gpus_per_node: int = Field(1, ge=1, le=1024)
    """Devices per node (LUMI-G: 8 GCDs; Snellius H100 nodes: 4)."""
    hardware: str = "h100"
    """Device preset for planning: h100, a100, mi250x-gcd, or custom:<peak TFLOP/s> (an H100's power and memory)."""
    mfu: float = Field(0.40, gt=0, le=1)
    """Model FLOPs utilisation assumed by `langadapt plan`."""
    grid: str | float = "world"
    """Grid carbon intensity for the CO2 estimate: a preset (lumi, hydro, world, gas, coal) or gCO2e/kWh."""
    preparation: PreparationConfig = PreparationConfig()
    """The CPU job that runs data..embeddings before the training job (`langadapt launch`, `langadapt plan`)."""

    @field_validator("hardware")
    @classmethod
    def _known_hardware(cls, hardware: str) -> str:
        """Checked by the one reader `plan` uses (recipe.hardware.get_hardware), so both agree."""
        try:
            get_hardware(hardware)
        except LangadaptError as exc:
            raise ValueError(str(exc)) from None
        return hardware

    @field_validator("grid")
    @classmethod
    def _known_grid(cls, grid: str | float) -> str | float:
        if isinstance(grid, (int, float)) and not 0 <= grid <= 10_000:
            raise ValueError(f"grid {grid:g} gCO2e/kWh: must be between 0 and 10000 (coal is about 820)")
        try:
            grid_intensity(grid)
        except LangadaptError as exc:
            raise ValueError(str(exc)) from None
        return grid

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node
