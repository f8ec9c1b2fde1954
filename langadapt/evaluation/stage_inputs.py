"""What the evaluate stage reads: its slice of the recipe (`EvaluateSlice`) and the files outside
the run whose content is in its print (`evaluate_inputs`: the suites, the data files their tasks
name, the `compare` models). The pipeline builds both without torch; the stage reads the same
`compare_folder` it hashes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from langadapt.evaluation.naming import split_named
from langadapt.inputs.model_folder import is_model_folder
from langadapt.recipe.evaluation import EvaluationConfig
from langadapt.recipe.slices import reads
from langadapt.run.layout import RunLayout


@dataclass(frozen=True)
class EvaluateSlice:
    """What the evaluate stage reads of the recipe: its section. The report's planned energy is read
    from the plan the pipeline wrote into the run folder (`planned_energy`), not from this slice: an
    estimate is not in the print. The files the stage reads from outside the run are
    `evaluate_inputs`."""

    config: EvaluationConfig = reads("evaluation")


def compare_folder(path: Path) -> Path | None:
    """The model an `evaluation.compare` path names: a Hugging Face model folder as itself, a run
    directory as its final (or latest) model; None when it is neither. The evaluate stage scores it
    and its print hashes it (`evaluate_inputs`)."""
    if is_model_folder(path):
        return path
    found = list(RunLayout(path).models_on_disk().values())
    return found[-1] if found else None


def evaluate_inputs(config: EvaluationConfig) -> tuple[tuple[str, Path], ...]:
    """The files the evaluate stage reads from outside the run, each under a name that does not
    depend on the working directory: every suite file and the data files its tasks name, resolved by
    the suite loader (`suite.suite_inputs`), and each `compare` model folder, under the entry as the
    recipe writes it (`compare_folder`; an entry that names no model yet adds nothing, and the stage
    refuses it)."""
    from langadapt.evaluation.suite import suite_inputs

    compared = []
    for entry in config.compare:
        folder = compare_folder(Path(split_named(entry)[1]))
        if folder is not None:
            compared.append((f"compare {entry}", folder))
    return (*suite_inputs(list(config.suites)), *compared)
