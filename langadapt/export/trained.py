"""What a run has trained, and which checkpoint `--checkpoint` names: checked by `langadapt export`
before torch is imported, so a refusal costs a fraction of a second, not the seconds of an import."""

from __future__ import annotations

from pathlib import Path

from langadapt.errors import LangadaptError
from langadapt.run.completion import is_complete
from langadapt.run.layout import MODEL_STAGES, STEP_PREFIX, TRAINING_STAGES, RunLayout


def completed_training_stages(layout: RunLayout, models: dict[str, Path] | None = None) -> tuple[str, ...]:
    """The training stages of this run that completed (of those the recipe enables, if known)."""
    enabled = None if models is None else {MODEL_STAGES[name] for name in models}
    return tuple(s for s in TRAINING_STAGES if (enabled is None or s in enabled) and is_complete(layout.stage_dir(s)))


def require_trained(layout: RunLayout, models: dict[str, Path] | None = None) -> tuple[str, ...]:
    stages = completed_training_stages(layout, models)
    if not stages:
        raise LangadaptError(f"{layout.root}: no completed training stage ({', '.join(TRAINING_STAGES)}): "
                             "nothing trained to export; run `langadapt run RECIPE` first")
    return stages


def parse_checkpoint(spec: str) -> tuple[str, int]:
    """(stage, step) of `--checkpoint STAGE/STEP` (`stage2/500`, or with the step folder's name)."""
    stage, _, step = spec.partition("/")
    step = step.removeprefix(STEP_PREFIX)
    if stage not in TRAINING_STAGES or not step.isdigit():
        raise LangadaptError(f"--checkpoint {spec}: expected STAGE/STEP with STAGE one of {', '.join(TRAINING_STAGES)}, "
                             "e.g. stage2/500")
    return stage, int(step)
