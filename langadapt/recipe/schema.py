"""The recipe: one validated schema for every knob of a run (LitGPT / OLMo-core style).

A recipe is a YAML file. Each top-level section is the config of one component, declared in this
package beside the others (`recipe/data.py`, `recipe/train.py`, ...: below every package it
configures), and each component only ever receives its own slice. Loading is strict:
unknown keys fail with "did you mean", errors name the file, line and dotted key, and
`--set a.b.c=value` overrides are applied before validation so they are checked the same way.

Stage 2 inherits every key that stage 1 sets explicitly (batch, sequence length, optimizer, ...)
except the ones that define a stage (steps, trainable, train_rows, schedule, mixture, replay, zero_stage, enabled); what was
inherited and what was overridden is recorded as dotted keys and logged when stage 2 starts (nanochat style).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from langadapt.errors import LangadaptError, key_parts
from langadapt.recipe.base import Config, FieldProblem
from langadapt.recipe.cluster import ClusterConfig, preparation_target
from langadapt.recipe.data import DataConfig
from langadapt.recipe.embeddings import EmbeddingConfig, default_head_init
from langadapt.recipe.errors import format_validation_error, read_yaml_mapping, set_flag
from langadapt.recipe.evaluation import EvaluationConfig
from langadapt.recipe.export import ExportConfig
from langadapt.recipe.languages import language_problem
from langadapt.recipe.overrides import apply_overrides
from langadapt.recipe.paths import COLD_SUFFIX, MAX_NAME_CHARS, name_problem, run_directory, run_root_problem
from langadapt.recipe.replay import REPLAY_ROLE, stage_mixture
from langadapt.recipe.tokenizer import TokenizerConfig
from langadapt.recipe.train import EngineConfig, TrainStageConfig

STAGE2_OWN_KEYS = {"enabled", "steps", "trainable", "train_rows", "schedule", "mixture", "replay", "zero_stage"}
"""Stage-2 keys never inherited from stage 1: they are what makes stage 2 a different stage."""


class BaseModelConfig(Config):
    """The pretrained (source) model to adapt, or the architecture of a scratch model."""

    path: str | None = None
    """Local Hugging Face model folder, or a Hub id (downloaded with huggingface_hub)."""
    build_recipe: str | None = None
    """Recipe that produces the base model when `path` does not exist yet (the demo's tiny model); its
    run's `export/model` must be `path`."""
    revision: str | None = None
    """Hub revision (branch, tag or commit) when `path` is a Hub id."""
    architecture: dict[str, Any] | None = None
    """Hugging Face config fields (model_type, hidden_size, ...) for `init: scratch` models."""


class Recipe(Config):
    """A complete langadapt run: data -> tokenizer -> embeddings -> stage1 -> stage2 -> evaluate -> export."""

    name: str
    """Run name; outputs go to <run_root>/<name>/."""
    run_root: str = "runs"
    """Folder that holds run directories (relative paths resolve against the working directory)."""
    seed: int = Field(1234, ge=0, le=2**31 - 1)
    """Global seed; every component derives its own seed from it."""
    init: Literal["warm", "scratch"] = "warm"
    """warm: transfer the base model to a new tokenizer; scratch: random init, no stage 1 (the cold baseline)."""
    base_model: BaseModelConfig = BaseModelConfig()
    """The model to adapt (warm) or the architecture to build (scratch)."""
    data: DataConfig
    """Corpora: sources, cleaning, held-out split."""
    tokenizer: TokenizerConfig
    """The new tokenizer for the target language."""
    embeddings: EmbeddingConfig = EmbeddingConfig()
    """How the new vocabulary's input and output embeddings are initialised."""
    engine: EngineConfig = EngineConfig()
    """Training engine shared by both stages (torch, DeepSpeed or FSDP2; precision, ZeRO)."""
    stage1: TrainStageConfig = TrainStageConfig()
    """Stage 1: train embeddings and LM head with the body frozen."""
    stage2: TrainStageConfig = TrainStageConfig()
    """Stage 2: continue pretraining with everything trainable."""
    cluster: ClusterConfig = ClusterConfig()
    """The machines stage 2 is planned and launched for."""
    evaluation: EvaluationConfig = EvaluationConfig()
    """Evaluation suites run on the base and adapted models."""
    export: ExportConfig = ExportConfig()
    """The exported Hugging Face folder, model card and optional Hub push."""

    @field_validator("name")
    @classmethod
    def _name_is_a_folder_name(cls, name: str) -> str:
        """The name becomes <run_root>/<name>: one folder name, never a path (recipe.paths.name_problem)."""
        if (problem := name_problem(name)) is not None:
            raise ValueError(problem)
        return name

    @field_validator("run_root")
    @classmethod
    def _run_root_can_hold_folders(cls, run_root: str) -> str:
        if (problem := run_root_problem(run_root)) is not None:
            raise ValueError(problem)
        return run_root

    @field_validator("data")
    @classmethod
    def _data_names_codes_and_split(cls, data: DataConfig) -> DataConfig:
        """Checks of the data section that the schema's own rules own (names that become folders,
        language codes, a held-out split that holds something), kept here so `langadapt.data`
        keeps no copy of them."""
        for i, source in enumerate(data.sources):
            # the name becomes its shard folder (tokens/<name>/); SourceConfig checks its characters
            if (problem := name_problem(source.name)) is not None:
                raise FieldProblem(("sources", i, "name"), problem)
            if (problem := language_problem(source.lang)) is not None:
                raise FieldProblem(("sources", i, "lang"), problem)
        for lang, labels in data.cleaning.lang_aliases.items():
            for code in (lang, *labels):
                if (problem := language_problem(code)) is not None:
                    raise FieldProblem(("cleaning", "lang_aliases", lang), problem)
        unsplit = [s.name for s in data.sources if s.valid_path is None]
        if data.valid_fraction == 0 and unsplit:
            raise FieldProblem(("valid_fraction",), f"0 holds out nothing of source(s) {', '.join(unsplit[:3])}: "
                               "held-out loss, bits per byte and the report would measure nothing; use e.g. "
                               "0.05 or give those sources a valid_path")
        return data

    @model_validator(mode="after")
    def _check_init(self) -> Recipe:
        if self.init == "warm" and not self.base_model.path:
            raise ValueError("init: warm needs base_model.path (the model to adapt)")
        if self.init == "scratch" and not (self.base_model.architecture or self.base_model.path):
            raise ValueError("init: scratch needs base_model.architecture (or a base_model.path config)")
        for stage in ("stage1", "stage2"):
            if self.init == "scratch" and getattr(self, stage).train_rows == "new":
                raise FieldProblem((stage, "train_rows"), "new: init: scratch copies no row from a base model, "
                                   "so every row is new; use all")
        return self

    @model_validator(mode="after")
    def _replay_distillation_has_a_teacher_and_rows(self) -> Recipe:
        """`replay_distillation` needs the base's rows (a warm init) and replay rows in the stage's
        mixture: without them it would silently distil nothing."""
        roles = {source.name: source.role for source in self.data.sources}
        for name in ("stage1", "stage2"):
            stage = getattr(self, name)
            if not stage.replay_distillation or not stage.enabled:
                continue
            if self.init == "scratch":
                raise FieldProblem((name, "replay_distillation"), "init: scratch has no base model whose predictions "
                                   "to keep; use 0")
            mixture = stage_mixture(self.data, name, stage)
            if not any(roles[source] == REPLAY_ROLE and ((entry.get("weight") or 0) > 0 or entry.get("epochs"))
                       for source, entry in mixture.items()):
                raise FieldProblem((name, "replay_distillation"), "the stage's mixture has no replay rows (no `role: "
                                   "replay` source with a weight or epochs), so there is nothing to distil; add one "
                                   "or use 0")
        return self

    @model_serializer(mode="wrap")
    def _head_init_as_hashed(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict[str, Any]:
        """A full dump (resolved.yaml, the stage fingerprints' `section_hash`) shows an unset
        `embeddings.head_init` as `default_head_init` decides it from the recipe alone: `same` on
        every tokenizer.kind but extend, still unset (null) on extend, where the base's tie decides.
        That is what recipes hashed before the default existed, so finished runs keep their prints.

        Resolved here, in the dump, and not written into the recipe: a value written by a validator
        counts as set, so `with_overrides` (which re-validates what was written) carried `same` into
        an override switching to extend, and a caller editing `recipe.tokenizer.kind` after loading
        kept it; written with `object.__setattr__` it would stay out of the set fields but still
        hold `same` after such an edit. The field stays unset, the dump of what was written
        (`exclude_unset`) leaves it out, and the transfer resolves it with the same rule once the
        base is read (an extension there: every base id kept, tokens appended)."""
        dumped = handler(self)
        embeddings = dumped.get("embeddings") if isinstance(dumped, dict) else None
        if not info.exclude_unset and isinstance(embeddings, dict) and embeddings.get("head_init", "") is None:
            embeddings["head_init"] = self.embeddings_as_hashed().head_init
        return dumped

    @model_validator(mode="after")
    def _cold_twin_name_fits(self) -> Recipe:
        """The cold twin's run is `<name>_cold`: a name that fits alone but not with the suffix
        would fail at the evaluate stage, after all the training."""
        if self.wants_cold_twin and name_problem(self.name + COLD_SUFFIX) is not None:
            raise FieldProblem(("name",), f"{len(self.name)} characters: evaluation.cold_baseline runs a cold twin "
                               f"named <name>{COLD_SUFFIX}, which must fit {MAX_NAME_CHARS}; at most "
                               f"{MAX_NAME_CHARS - len(COLD_SUFFIX)} (or evaluation.cold_baseline: false)")
        return self

    @model_validator(mode="after")
    def _one_preparation_target(self) -> Recipe:
        """cluster.preparation's partition/account and data.datatrove's spellings of them agree
        (`cluster.preparation_target`): a located error here, not jobs on the wrong partition."""
        preparation_target(self.cluster.preparation, self.data.datatrove)
        return self

    @model_validator(mode="after")
    def _replay_can_be_honoured(self) -> Recipe:
        """A replay share the sources cannot give (no replay source, epoch-specified sources) is a
        recipe error at load time, on the line that set it, not a failure when the stage starts."""
        from langadapt.recipe.replay import stage_mixture, stage_replay

        for name in self.training_stages:
            stage = getattr(self, name)
            share, key = stage_replay(self.data, name, stage)
            if share is None:
                continue
            try:
                stage_mixture(self.data, name, stage)
            except LangadaptError as exc:
                if exc.key != key_parts(key):
                    continue  # an unknown source in the stage's mixture: preflight reports it
                raise FieldProblem(exc.key, exc.what) from None
        return self

    def embeddings_as_hashed(self) -> EmbeddingConfig:
        """`embeddings` as its full dump shows it (`_head_init_as_hashed`): what the embeddings
        stage's slice holds, so the stage runs on what its print hashed (an unset head_init is
        `same` on every road but extend; on extend it stays unset for the transfer to decide from
        the base). Built when the stage table is, so a road changed after loading counts."""
        if self.embeddings.head_init is not None:
            return self.embeddings
        head_init = default_head_init(self.tokenizer.kind == "extend", tied=None)
        return self.embeddings.model_copy(update={"head_init": head_init})

    @property
    def run_dir(self) -> Path:
        return run_directory(self.run_root, self.name)

    def training_skip_reason(self, name: str) -> str | None:
        """Why training stage `name` (stage1, stage2) does not run, or None when it does: the one
        answer the pipeline, `plan`, preflight and the cold twin's compute budget all use."""
        if name == "stage1" and self.init == "scratch":
            return "init: scratch has no embedding stage"
        return None if getattr(self, name).enabled else f"{name}.enabled is false"

    @property
    def wants_cold_twin(self) -> bool:
        """Only a warm run with suites to score has a cold twin (a scratch run is its own cold baseline)."""
        return bool(self.evaluation.cold_baseline and self.evaluation.suites and self.init == "warm")

    @property
    def training_stages(self) -> list[str]:
        """The training stages this recipe runs, in order."""
        return [name for name in ("stage1", "stage2") if self.training_skip_reason(name) is None]


def with_overrides(recipe: Recipe, overrides: list[str]) -> tuple[Recipe, dict[str, Any]]:
    """A validated recipe with more `--set` items, and its tree. Re-validated from what was
    WRITTEN (fields left at their defaults stay unset), so a check that applies only to a value
    the user set (a warm-up longer than its stage) sees the same recipe the user's load saw."""
    tree = apply_overrides(recipe.model_dump(mode="json", exclude_unset=True), overrides)
    return Recipe.model_validate(tree), tree


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _leaf_keys(value: Any, key: str) -> list[str]:
    """`key` and, below a non-empty mapping, the dotted key of every value in it."""
    if isinstance(value, dict) and value:
        return [leaf for name, inner in value.items() for leaf in _leaf_keys(inner, f"{key}.{name}")]
    return [key]


def _inheritance(stage1: dict[str, Any], stage2: dict[str, Any],
                 prefix: str = "") -> tuple[list[str], list[str]]:
    """(inherited, overridden) dotted keys of what stage 1 wrote, as `_deep_merge` combines them: a
    key stage 2 leaves out is inherited with every value below it; a mapping both write is split key
    by key; any other key stage 2 writes is overridden whole."""
    inherited, overridden = [], []
    for name, value in stage1.items():
        key = f"{prefix}{name}"
        if name not in stage2:
            inherited += _leaf_keys(value, key)
        elif isinstance(value, dict) and value and isinstance(stage2[name], dict):
            below = _inheritance(value, stage2[name], f"{key}.")
            inherited, overridden = inherited + below[0], overridden + below[1]
        else:
            overridden.append(key)
    return inherited, overridden


def inherit_stage2(tree: dict[str, Any]) -> dict[str, list[str]]:
    """Fill stage2 from stage1 in place; returns {"inherited": [...], "overridden": [...]}, dotted
    keys below stage 1 (`optimizer.betas`): a stage 2 that sets `optimizer.lr` overrides that one
    and inherits the rest of stage 1's optimizer."""
    stage1, stage2 = tree.get("stage1") or {}, tree.get("stage2") or {}
    if not isinstance(stage1, dict) or not isinstance(stage2, dict):
        return {"inherited": [], "overridden": []}
    shared = {k: v for k, v in stage1.items() if k not in STAGE2_OWN_KEYS}
    tree["stage2"] = _deep_merge(shared, stage2)
    inherited, overridden = _inheritance(shared, stage2)
    return {"inherited": sorted(inherited), "overridden": sorted(overridden)}


class LoadedRecipe:
    """A validated recipe plus where it came from and what stage 2 inherited."""

    def __init__(self, recipe: Recipe, path: Path, tree: dict[str, Any], inheritance: dict[str, list[str]],
                 overrides: dict[str, str] | None = None):
        self.recipe, self.path, self.tree, self.inheritance = recipe, path, tree, inheritance
        self.overrides = overrides or {}
        """Dotted key -> the `--set` item that wrote it (later errors blame the flag, not a line)."""

    def resolved_yaml(self) -> str:
        """The fully resolved recipe (defaults included), as written into the run directory."""
        data = self.recipe.model_dump(mode="json")
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> LoadedRecipe:
    """Load, override, inherit and validate a recipe; every problem is one LangadaptError line."""
    path = Path(path)
    tree, root = read_yaml_mapping(path, "recipe")
    tree = apply_overrides(tree, overrides or [])
    inheritance = inherit_stage2(tree)
    written = {item.partition("=")[0].strip(): set_flag(item) for item in overrides or []}
    try:
        recipe = Recipe.model_validate(tree)
    except ValidationError as exc:
        values = {item.partition("=")[0].strip(): item.partition("=")[2] for item in overrides or []}
        raise LangadaptError(format_validation_error(exc, Recipe, path, root, written, values)) from None
    return LoadedRecipe(recipe, path, tree, inheritance, written)
