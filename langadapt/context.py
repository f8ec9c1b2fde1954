"""What a pipeline stage receives besides its own config slice."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class StageContext:
    """Where a stage reads earlier artifacts and writes its own.

    A stage writes only under `out` (its folder `runs/<name>/<stage>/`). The pipeline writes the
    manifest and the completion marker after the stage returns, so a stage that raises is never
    marked complete. Earlier stages' folders are reached with `stage_dir(name)`.
    """

    run_dir: Path
    """The run directory `runs/<name>/`."""
    stage: str
    """This stage's name (data, tokenizer, embeddings, stage1, stage2, evaluate, export)."""
    seed: int
    """The recipe's global seed; components derive their own seeds from it."""
    base_model: str | None = None
    """Local folder of the base (source) model, resolved by the pipeline; None for `init: scratch`."""
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("langadapt"))

    @property
    def out(self) -> Path:
        """This stage's output folder (created by the pipeline before the stage runs)."""
        return self.run_dir / self.stage

    def stage_dir(self, name: str) -> Path:
        """The folder of another stage of the same run."""
        return self.run_dir / name
