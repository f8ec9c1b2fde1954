"""The run directory contract: where every artifact lives, each file and folder named once.

    runs/<name>/recipe.resolved.yaml
    runs/<name>/recipe.owner.json         the recipe file that made the run (run.identity)
    runs/<name>/<stage>/...artifacts...   paths named once, by `RunLayout` below
    runs/<name>/<stage>/manifest.json     inputs, fingerprint, versions, timings, stage summary
    runs/<name>/<stage>/COMPLETE          written last: only its presence means "done"

`RunLayout` is the only place that spells a stage's folder or an artifact's path; the pipeline
hands it to every stage in the `StageContext`. A stage re-run with a different fingerprint is
built in a sibling work folder (`work_dir`) and swapped in only when complete, so a failed re-run
never costs the previous complete output; training stages resume in place instead (their
checkpoints are the partial work worth keeping). When the manifest, the marker and the swap are
written is `run.completion`'s.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from langadapt.inputs.model_folder import SAFETENSORS, is_model_folder
from langadapt.inputs.text import read_input_text
from langadapt.recipe.strict_yaml import MAX_FILE_BYTES

MARKER = "COMPLETE"
MANIFEST = "manifest.json"
TRAINER_STATE = "trainer_state.json"
"""A complete checkpoint's marker file (train.checkpoint writes it last, rank 0)."""
LATEST = "latest"
"""The file in a stage's checkpoints/ that names its newest complete checkpoint."""
FINGERPRINT = ".fingerprint"

STAGES = ("data", "tokenizer", "embeddings", "stage1", "stage2", "evaluate", "export")
TRAINING_STAGES = ("stage1", "stage2")
MODEL_STAGES = {"init": "embeddings", "stage1": "stage1", "adapted": "stage2"}
"""Model name (as evaluation reports it) -> the stage whose `model/` folder holds it."""


STEP_PREFIX = "step_"
STEP_DIR = re.compile(rf"^{STEP_PREFIX}(\d+)$")
"""A checkpoint folder's name under a training stage's checkpoints/ (train.checkpoint writes them)."""
WEIGHTS = SAFETENSORS
"""The one weights file of a torch-engine checkpoint (a model folder's, as Hugging Face names it)."""
RESULTS = "results.json"
"""The evaluate stage's numbers (also the name in a `langadapt eval --out` report folder)."""


def step_dir_name(step: int) -> str:
    """The folder of the checkpoint at `step` (zero-padded: folders sort by step)."""
    return f"{STEP_PREFIX}{step:08d}"


def complete_checkpoints(root: Path) -> dict[int, Path]:
    """step -> folder of every complete checkpoint in `root` (a `step_N` folder holding trainer_state.json;
    train.checkpoint only ever names a folder so once it is complete)."""
    if not root.is_dir():
        return {}
    return {int(m.group(1)): p for p in root.iterdir()
            if (m := STEP_DIR.match(p.name)) and (p / TRAINER_STATE).is_file()}


def latest_checkpoint(root: Path) -> Path | None:
    """The checkpoint `root/latest` names, or None when `root` holds no complete checkpoint.

    If the named folder is gone (a crash between moving a re-saved step aside and renaming
    its replacement in), or `latest` was never written (a crash right after the first
    rename), the newest `step_N` folder is used: every such folder is complete."""
    pointer = root / LATEST
    if pointer.is_file():
        path = root / pointer.read_text().strip()
        if (path / TRAINER_STATE).is_file():
            return path
    complete = complete_checkpoints(root)
    return complete[max(complete)] if complete else None


@dataclass(frozen=True)
class DataPaths:
    root: Path

    @property
    def train(self) -> Path:
        return self.root / "train"

    @property
    def valid(self) -> Path:
        return self.root / "valid"

    @property
    def stats(self) -> Path:
        """Per source: documents read, kept and dropped (the stage's summary, also as a file)."""
        return self.root / "stats.json"


@dataclass(frozen=True)
class TokenizerPaths:
    root: Path

    @property
    def tokenizer(self) -> Path:
        """A folder `AutoTokenizer.from_pretrained` loads."""
        return self.root / "tokenizer"

    @property
    def tokens(self) -> Path:
        """Token shards, one folder per source (`<source>/tokens.bin`, `meta.json`)."""
        return self.root / "tokens"

    @property
    def valid_tokens(self) -> Path:
        """The held-out split's token shards, laid out as `tokens` (see langadapt.data.shards)."""
        return self.tokens / "valid"

    @property
    def metrics(self) -> Path:
        """Base vs new tokenizer on held-out text (`tokenizer.metrics.compare_tokenizers`)."""
        return self.root / "metrics.json"

    @property
    def fertility_plot(self) -> Path:
        return self.root / "fertility.png"


@dataclass(frozen=True)
class ModelStagePaths:
    """embeddings, stage1 and stage2: a loadable model folder (training also checkpoints, metrics)."""

    root: Path

    @property
    def model(self) -> Path:
        return self.root / "model"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def summary(self) -> Path:
        """A training stage's summary (also in its manifest), written by rank 0 when it finishes."""
        return self.root / "summary.json"


@dataclass(frozen=True)
class EmbeddingsPaths(ModelStagePaths):
    """The embeddings stage: its model folder, and the record of which rows it copied from the base."""

    @property
    def mapping(self) -> Path:
        """Every new token's old pieces (`embeddings.mapping.VocabMapping`)."""
        return self.root / "mapping.json"

    @property
    def report(self) -> Path:
        """What the initialisation did (method, rows copied, the norms it matched)."""
        return self.root / "report.json"

    @property
    def shared_rows(self) -> Path:
        """`embeddings.row_plan.SharedRows`: the rows `train_rows: new` keeps (none for init: scratch)."""
        return self.root / "shared_rows.json"


@dataclass(frozen=True)
class ExportPaths:
    root: Path

    @property
    def model(self) -> Path:
        return self.root / "model"

    @property
    def card(self) -> Path:
        return self.model / "README.md"


def read_manifest(stage_dir: Path) -> dict[str, Any]:
    """The manifest a stage folder's run wrote (`run.completion.write_manifest`): the one reader of
    manifest.json; {} when there is none (yet) or it is not a JSON object."""
    try:
        manifest = json.loads((stage_dir / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return manifest if isinstance(manifest, dict) else {}


def recipe_tree(path: Path) -> dict[str, Any]:
    """A recipe YAML (a run's resolved recipe, the one an export ships) as a mapping; {} when it is
    missing or not one (one over a recipe's size is refused: it is read whole)."""
    if not path.is_file():
        return {}
    try:
        tree = yaml.safe_load(read_input_text(path, "recipe", MAX_FILE_BYTES))
    except yaml.YAMLError:
        return {}
    return tree if isinstance(tree, dict) else {}


@dataclass(frozen=True)
class RunLayout:
    """Every path of one run, defined once.

    `work` maps a stage to the folder it is being built in (see `run.completion.promote`): the
    stage sees its own paths there and everyone else's at their final place.
    """

    root: Path
    work: tuple[tuple[str, Path], ...] = ()

    def stage_dir(self, stage: str) -> Path:
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}")
        return dict(self.work).get(stage, self.root / stage)

    def building(self, stage: str, folder: Path) -> RunLayout:
        """This layout with `stage` written into `folder` instead of its final place."""
        return replace(self, work=(*[(s, p) for s, p in self.work if s != stage], (stage, folder)))

    def final(self) -> RunLayout:
        return RunLayout(self.root)

    @property
    def data(self) -> DataPaths:
        return DataPaths(self.stage_dir("data"))

    @property
    def tokenizer(self) -> TokenizerPaths:
        return TokenizerPaths(self.stage_dir("tokenizer"))

    @property
    def embeddings(self) -> EmbeddingsPaths:
        return EmbeddingsPaths(self.stage_dir("embeddings"))

    @property
    def stage1(self) -> ModelStagePaths:
        return ModelStagePaths(self.stage_dir("stage1"))

    @property
    def stage2(self) -> ModelStagePaths:
        return ModelStagePaths(self.stage_dir("stage2"))

    @property
    def evaluate(self) -> Path:
        """results.json, report.md, report.html, plots/."""
        return self.stage_dir("evaluate")

    @property
    def evaluation_results(self) -> Path:
        """The evaluate stage's numbers (`{"models": {NAME: {LANG: {...}}}}`), read by the model card."""
        return self.evaluate / RESULTS

    @property
    def export(self) -> ExportPaths:
        return ExportPaths(self.stage_dir("export"))

    def trained(self, stage: str) -> ModelStagePaths:
        """The model-producing stage `stage` (embeddings, stage1, stage2)."""
        return ModelStagePaths(self.stage_dir(stage))

    @property
    def resolved_recipe(self) -> Path:
        return self.root / "recipe.resolved.yaml"

    def recipe(self) -> dict[str, Any]:
        """The recipe this run was made with, as a mapping: the one reader of recipe.resolved.yaml,
        {} when the run has none. The file holds every field, defaults included, as the pipeline
        resolved them, so no reader restates a default. Not validated again: a recipe's checks of
        what its user wrote (`model_fields_set`, e.g. warm-up steps beyond a stage's steps) would
        read every resolved default as written."""
        return recipe_tree(self.resolved_recipe)

    @property
    def owner(self) -> Path:
        """The recipe file that made this run (`run.identity`): another file with the same name is refused."""
        return self.root / "recipe.owner.json"

    @property
    def lock(self) -> Path:
        return self.root / ".lock"

    @property
    def hash_cache(self) -> Path:
        return self.root / ".hashes.json"

    @property
    def cli_eval(self) -> Path:
        """Where `langadapt eval RUN` writes (never into the pipeline's own evaluate/)."""
        return self.root / "eval"

    def work_dir(self, stage: str) -> Path:
        """A stage being rebuilt, beside its previous complete output (same filesystem: rename is atomic)."""
        return self.root / f".{stage}.partial"

    def retired_dir(self, stage: str) -> Path:
        return self.root / f".{stage}.previous"

    def manifest(self, stage: str) -> Path:
        return self.stage_dir(stage) / MANIFEST

    def stage_summary(self, stage: str) -> dict[str, Any]:
        """The `summary` a finished stage recorded in its manifest; {} when there is none (yet)."""
        summary = read_manifest(self.stage_dir(stage)).get("summary")
        return summary if isinstance(summary, dict) else {}

    def checkpoint_export(self, name: str) -> ExportPaths:
        """Where `langadapt export --checkpoint` writes checkpoint `name`: outside every stage folder,
        since a re-run of the export stage replaces export/ whole."""
        return ExportPaths(self.root / "exported_checkpoints" / name)

    def models_on_disk(self) -> dict[str, Path]:
        """init / stage1 / adapted folders that hold a model, for a run seen from outside a pipeline
        (`langadapt eval RUN`); inside one, the pipeline says which models the recipe made."""
        found = {name: self.trained(stage).model for name, stage in MODEL_STAGES.items()}
        return {name: path for name, path in found.items() if is_model_folder(path)}


def owning_run_dir(path: Path) -> Path | None:
    """The run directory `path` is in (itself or a parent holding a run's recipe files), if any.

    `langadapt eval` and anything else that writes beside a pipeline asks this to know which run
    lock to take: a folder inside a run is that run's to write, one writer at a time."""
    for folder in (path, *path.parents):
        layout = RunLayout(folder)
        if layout.resolved_recipe.is_file() or layout.owner.is_file():
            return folder
    return None
