"""What a pipeline stage receives besides its own config slice."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from langadapt.run.layout import RunLayout
from langadapt.runtime.placement import DistInfo


@dataclass(frozen=True)
class StageContext:
    """Where a stage reads earlier artifacts and writes its own.

    A stage writes only under `out` (its folder, which the pipeline may have pointed at a work
    folder that replaces the previous output once the stage succeeds). Every other path, this
    stage's or an earlier one's, comes from `layout`. The pipeline writes the manifest and the
    completion marker after the stage returns, so a stage that raises is never marked complete.
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
    layout: RunLayout = None  # type: ignore[assignment]  # set in __post_init__
    """The run's paths (default: `RunLayout(run_dir)`, every stage at its final place)."""
    models: dict[str, Path] | None = None
    """The models this run's recipe produces, in pipeline order (init, stage1, adapted: the
    ones whose stage is enabled), named as evaluation reports them. Set by the pipeline; None
    when a stage is called on its own (evaluation then looks at what is on disk)."""
    overwrite: bool = False
    """The user allowed replacing output a person may have edited (`--overwrite`)."""
    needed: dict[str, Path] = field(default_factory=dict)
    """What the runs this stage depends on produced, by role (`pipeline.stages.Dependency`): the cold
    twin's model for evaluate. Empty for every other stage."""
    dist: DistInfo = field(default_factory=DistInfo.from_env)
    """This process's place in the job, read once by the pipeline (only training stages run on
    more than one rank)."""

    def __post_init__(self) -> None:
        if self.layout is None:
            object.__setattr__(self, "layout", RunLayout(self.run_dir))

    @property
    def out(self) -> Path:
        """This stage's output folder (created by the pipeline before the stage runs)."""
        return self.layout.stage_dir(self.stage)

    def own_models(self) -> dict[str, Path]:
        """This run's models: `models` as the pipeline set them, else (a stage called on its own)
        those the run directory holds (`RunLayout.models_on_disk`)."""
        return self.models if self.models is not None else self.layout.models_on_disk()
