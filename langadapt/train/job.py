"""One training job, resolved once: what `fit` trains with, built by `TrainingJob.resolve`.

The training stage and a library caller both build the job first, before any model is loaded, so
an engine that cannot run here fails in seconds; `fit` then reads the resolved settings from it
and never resolves again (one `resolve_training` call per stage, so the two cannot disagree).
Below `fit` the job is what the engines and the stage's helpers take, not its pieces again; the
DeepSpeed JSON is one of its fields, built with it, so ZeRO-3 loading and the engine read one dict.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from langadapt.embeddings.row_plan import SharedRows
from langadapt.errors import LangadaptError
from langadapt.planning.training import TrainingSettings, resolve_training
from langadapt.recipe.train import EngineConfig, TrainStageConfig
from langadapt.runtime.distributed import DistInfo
from langadapt.train.distill import ReplayDistillation
from langadapt.train.engines import deepspeed_json

log = logging.getLogger("langadapt.train")

STAGE_NAMES = ("stage1", "stage2")
"""The stages whose name sets the default `trainable` (TrainStageConfig.trainable_patterns)."""
ONE_STAGE = "train"
"""The name of a job resolved without one (one stage of what `config.trainable` names, else all)."""


@dataclass(frozen=True)
class TrainingJob:
    """Everything one training stage runs with, resolved once (build it with `TrainingJob.resolve`)."""

    config: TrainStageConfig
    """The stage's recipe slice: steps, batch, optimizer, schedule, checkpoints, monitoring."""
    settings: TrainingSettings
    """`resolve_training`'s verdict for this world: the checked engine, global batch, what trains."""
    out_dir: Path
    """The stage folder: checkpoints, metrics and the final `model/` go under it."""
    seed: int
    """The seed of this stage's Python, NumPy and torch RNGs (each rank adds its rank to torch's)."""
    dist: DistInfo
    """This process's place in the world the settings were resolved for."""
    tokenizer: Any = None
    """Saved beside the final weights when given, so `out_dir/model` loads on its own."""
    shared_rows: SharedRows | None = None
    """The embedding rows copied from the base, which `config.train_rows: new` keeps."""
    distillation: ReplayDistillation | None = None
    """The teacher of `config.replay_distillation` (the stage loads it: `train.stage.load_distillation`)."""
    deepspeed_config: dict[str, Any] | None = None
    """The DeepSpeed JSON (`engines.deepspeed_json.deepspeed_config`) when the engine is DeepSpeed, else None.

    Built when the job is (`__post_init__`), so a raw `engine.deepspeed_config` that contradicts the
    recipe fails at `resolve`, before any model loads; `dataclasses.replace` carries it over
    instead of building it again. ZeRO-3 loading (`stage.load_model`) and `DeepSpeedEngine` both
    read this one dict: they cannot be handed two different configurations."""

    def __post_init__(self) -> None:
        if self.deepspeed_config is None and self.engine.kind == "deepspeed":
            # The builder is looked up on its module at call time: a test counting its calls sees this one.
            built = deepspeed_json.deepspeed_config(self.config, self.stage, self.engine, self.dist.world_size)
            object.__setattr__(self, "deepspeed_config", built)  # frozen: set once, as the dataclass's init would

    @property
    def stage(self) -> str:
        """The stage's name in logs, metrics and error keys: stage1, stage2 or train."""
        return self.settings.stage

    @property
    def run_label(self) -> str:
        """`<run>/<stage>` (`tiny_ci/stage2`), the console's and the trackers' name for this job: the
        run is the folder `out_dir` lies in, as the pipeline lays a run out (`<run_root>/<name>/<stage>`)."""
        return f"{Path(os.path.normpath(self.out_dir.absolute())).parent.name}/{self.stage}"

    @property
    def engine(self) -> EngineConfig:
        """The engine after `check_engine` (ZeRO stage, compile and fused loss decided)."""
        return self.settings.engine

    @classmethod
    def resolve(cls, config: TrainStageConfig, engine: EngineConfig, out_dir: Path, *, seed: int,
                stage_name: str | None = None, dist: DistInfo | None = None, tokenizer: Any = None,
                shared_rows: SharedRows | None = None) -> TrainingJob:
        """Check `engine` against this world and stage and fix what trains, before anything loads.

        `stage_name` decides what trains when `config.trainable` is unset, because a
        `TrainStageConfig` does not know which stage it is: "stage1" trains the embeddings and head
        only, "stage2" the whole model. None (the library's one-stage road: `transfer_embeddings`,
        then `fit`) trains `config.trainable`, else the whole model, under the name "train", and
        says so in the log: it never passes for "stage2" in logs and trackers, and a caller who
        meant stage 1 is told that the body trains. Any other name is refused (a "stage_1"
        would train the body as well). `dist` defaults to the world the environment describes.
        """
        name = _stage_name(stage_name, config)
        dist = dist or DistInfo.from_env()
        device_type = "cuda" if torch.cuda.is_available() else "cpu"
        settings = resolve_training(name, config, engine, dist.world_size, device_type)
        return cls(config, settings, Path(out_dir), seed, dist, tokenizer, shared_rows)


def _stage_name(stage_name: str | None, config: TrainStageConfig) -> str:
    """The stage's name; see `TrainingJob.resolve` for why None is not "stage2"."""
    if stage_name is None:
        if config.trainable is None:
            log.info("%s: no stage_name and no config.trainable: the whole model trains "
                     "(stage_name='stage1' trains the embeddings and head only)", ONE_STAGE)
        return ONE_STAGE
    if stage_name not in STAGE_NAMES:
        raise LangadaptError(f"TrainingJob.resolve: stage_name={stage_name!r}; pass 'stage1' (embeddings and head "
                             "train), 'stage2' (the whole model) or leave it out (config.trainable, else the whole "
                             "model)")
    return stage_name
