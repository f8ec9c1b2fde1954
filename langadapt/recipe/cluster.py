"""The planner's slice of the recipe: the machines stage 2 is planned and launched for.

`hardware` and `grid` are validated by the same functions `langadapt plan` reads them with
(`recipe.hardware`), so a recipe that loads is a recipe that plans.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from langadapt.errors import LangadaptError
from langadapt.recipe.base import Config
from langadapt.recipe.hardware import get_hardware, grid_intensity


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
