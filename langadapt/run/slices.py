"""What each pipeline stage reads of the recipe: its slice, bound when the stage table is built.

Every stage's entry point is `run(slice, ctx) -> summary` (`run.pipeline.Entry`; the protocol
test in tests/run/test_stage_protocol.py checks each one): the slice carries the stage's own
section and whatever it reads of the others, built once by `run.pipeline.stage_table`, whose
`sections` name the same parts, so the stage's fingerprint covers exactly what it reads. The run
directory, the base model, the distributed setup and the runs it depends on come in the
`StageContext` instead. Torch-free: `langadapt plan` and dry runs build the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langadapt.data.config import DataConfig
from langadapt.embeddings.config import EmbeddingConfig
from langadapt.evaluation.config import EvaluationConfig
from langadapt.export.config import ExportConfig
from langadapt.export.provenance import RunFacts
from langadapt.recipe import Recipe
from langadapt.tokenizer.config import TokenizerConfig
from langadapt.train.config import EngineConfig, TrainStageConfig


@dataclass(frozen=True)
class DataSlice:
    config: DataConfig


@dataclass(frozen=True)
class TokenizerSlice:
    config: TokenizerConfig
    num_workers: int | None = None
    """The recipe's data.num_workers: processes that encode the token shards (None: every core, one
    for a small corpus). The shards are the same whatever it is, so it is in no fingerprint."""


@dataclass(frozen=True)
class EmbeddingsSlice:
    """`init: warm`: the base model's embeddings moved to the new tokenizer."""

    config: EmbeddingConfig


@dataclass(frozen=True)
class ScratchSlice:
    """`init: scratch`: a model drawn at random for the new tokenizer."""

    architecture: dict[str, Any] | None
    """base_model.architecture; None: the architecture of the base model's config (`ctx.base_model`)."""


@dataclass(frozen=True)
class TrainingSlice:
    """What a training stage reads of the recipe."""

    name: str
    """stage1 or stage2."""
    config: TrainStageConfig
    engine: EngineConfig
    mixture: dict[str, dict] | None = None
    """The data mixture with this stage's overrides and replay share applied (data.replay.stage_mixture)."""
    after_stage1: bool = False
    """Start from stage1/model (stage 2 of a run whose stage 1 is enabled), else from embeddings/model."""
    force_epochs: bool = False
    """The recipe's data.force_epochs: more than 16 epochs of a source, as `langadapt plan` and preflight assume."""
    document_masking: bool = False
    """The recipe's data.document_masking: attention stays inside each packed document."""


@dataclass(frozen=True)
class EvaluateSlice:
    config: EvaluationConfig
    planning: Recipe | None = None
    """The recipe `langadapt plan` estimates each training stage's energy from (the report's
    planned column beside the measured one); None: no estimate. The stage table fingerprints the
    parts planning reads (`run.pipeline.PLANNING_KEYS`), so `--set cluster.hardware=...` re-runs
    evaluate instead of leaving a report planned for the old hardware."""


@dataclass(frozen=True)
class ExportSlice:
    config: ExportConfig
    facts: RunFacts
    """The recipe's facts the model card states (languages, sources and their licences, the base)."""
