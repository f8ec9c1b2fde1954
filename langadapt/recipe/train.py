"""Config slices of the training stages: optimizer, schedule, checkpoints, the stage, the engine.

Both stages use `TrainStageConfig` (the recipe's `stage1` and `stage2` sections; stage 2 inherits
what stage 1 sets, see `langadapt.recipe`); they differ in `trainable`, whose default depends on
the stage (stage 1: input embeddings + LM head; stage 2: everything). `EngineConfig` is shared
by both stages. Plain settings only: what a stage derives from them on a given machine (checks,
the global batch, compile and fused loss resolved) is `langadapt.planning.training`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from langadapt.recipe.base import Config, FieldProblem
from langadapt.recipe.data import TRAINING_SOURCE_FIELDS
from langadapt.recipe.languages import LanguageCode
from langadapt.recipe.slices import reads


MAX_STEPS = 1_000_000_000
"""Upper bound of every step count: past any real run, far below where arithmetic on it misbehaves."""
MAX_GLOBAL_BATCH = 1 << 32
"""Upper bound of `global_batch_size` (sequences): micro_batch_size x grad_accum_steps at their bounds."""
MAX_WEIGHT = 1_000_000
"""Upper bound of a mixture weight: weights are relative shares, so a larger one is a typo (1e6 for 1e-6)."""

EMBEDDING_PATTERNS = [
    "*embed_tokens.weight",  # Llama, Mistral, Qwen, Gemma, OPT
    "lm_head.weight",  # most untied heads
    "*.wte.weight",  # GPT-2, GPT-J
    "*embed_in.weight",  # GPT-NeoX / Pythia input
    "embed_out.weight",  # GPT-NeoX / Pythia head
    "*word_embeddings.weight",  # BLOOM, Falcon
]
"""Stage-1 default: input embeddings + LM head of the common families (glob over parameter names)."""


class OptimizerConfig(Config):
    """AdamW settings (decoupled weight decay, applied only to trainable matrices)."""

    lr: float = Field(1e-4, gt=0, le=1)
    """Peak learning rate, reached at the end of warm-up."""
    betas: tuple[Annotated[float, Field(ge=0, lt=1)], Annotated[float, Field(ge=0, lt=1)]] = (0.9, 0.95)
    """AdamW (beta1, beta2); 0.95 is the usual LLM-pretraining choice (NorMistral, Llama)."""
    eps: float = Field(1e-8, gt=0, le=1)
    """AdamW epsilon."""
    weight_decay: float = Field(0.1, ge=0, le=10)
    """Decoupled weight decay for matrices; norms and biases never decay."""
    decay_embeddings: bool = True
    """Also decay embedding/head matrices (Megatron and NorMistral do; stage 1 trains nothing else); off under `train_rows: new`."""
    body_lr_scale: float = Field(1.0, gt=0, le=100, exclude_if=lambda value: value == 1.0)
    """The learning rate of every trainable tensor that is not an embedding or head matrix, as a
    fraction of `lr` (the schedule scales both alike): below 1 in stage 2 lets the new rows learn at
    `lr` while the body, where the base's languages live, moves less (on the demo's extension 0.5 was
    level and 0.25 cost 0.7% of Bokmål, English unchanged: benchmarks/README.md frontier). Unset (1.0)
    it is not in the recipe's dump, so stage fingerprints made before it hold."""


class ScheduleConfig(Config):
    """Learning-rate schedule: linear warm-up, then the chosen shape (see langadapt.train.lr)."""

    kind: Literal["constant", "cosine", "wsd", "linear"] = "constant"
    """Shape after warm-up: constant, cosine decay, warmup-stable-decay, or linear decay."""
    warmup_steps: int = Field(10, ge=0, le=MAX_STEPS)
    """Linear warm-up steps from ~0 to the peak LR (stage 2 re-warms from its own step 0)."""
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    """Final LR as a fraction of the peak, for cosine, wsd and linear."""
    decay_fraction: float = Field(0.2, gt=0, le=1)
    """wsd only: the last fraction of all steps spent decaying linearly to the minimum."""


class CheckpointConfig(Config):
    """When to write resumable checkpoints (atomic; `latest` names only complete ones)."""

    every_steps: int | None = Field(500, ge=1, le=MAX_STEPS)
    """Write a checkpoint every this many steps (None: only by time, signal and at the end)."""
    every_minutes: float | None = Field(None, gt=0, le=1_000_000)
    """Also write one when this many minutes passed since the last (None: off)."""
    keep_last: int = Field(2, ge=1, le=10_000)
    """Keep this many most recent complete checkpoints; older ones are deleted."""
    at_end: bool = True
    """Also write one after the last step; false for throughput runs (`launch --sweep`) that nobody resumes: the final model is written either way."""


class MixtureEntry(Config):
    """A training stage's override of one source's share: REPLACES that source's weight/epochs/max_epochs."""

    weight: float | None = Field(None, ge=0, le=MAX_WEIGHT)
    """Share of the stage's token budget left after fixed-epoch sources."""
    epochs: float | None = Field(None, gt=0)
    """Fixed number of passes over the source's unique tokens (instead of a weight)."""
    max_epochs: float | None = Field(None, gt=0)
    """Cap on passes for a weighted source; the excess goes to the other weighted sources."""

    @model_validator(mode="after")
    def _weight_or_epochs(self) -> MixtureEntry:
        if self.weight is not None and self.epochs is not None:
            raise ValueError("set either weight or epochs, not both")
        return self


class ValidationConfig(Config):
    """Held-out loss and bits per byte while training (see langadapt.train.monitoring.validation)."""

    every_steps: int | None = Field(None, ge=1, le=MAX_STEPS)
    """Score the held-out split every this many steps and at the last step (None: off)."""
    tokens_per_lang: int = Field(32768, ge=1, le=10**12)
    """Held-out tokens scored per language: a fixed set of whole seq_len windows, chosen once."""
    langs: list[LanguageCode] | None = None
    """Languages to score; None: the languages of the sources this stage trains on."""


class TrainStageConfig(Config):
    """One training stage (stage 1 or stage 2); both run the same loop, `langadapt.train.loop.fit`."""

    enabled: bool = True
    """Run this stage; a disabled one is skipped and writes nothing: without stage 1, stage 2 starts from the
    embeddings; without stage 2, stage 1's model is the run's last."""
    steps: int = Field(100, ge=1, le=MAX_STEPS)
    """Optimizer steps."""
    micro_batch_size: int = Field(8, ge=1, le=65_536)
    """Sequences per device per forward/backward."""
    grad_accum_steps: int = Field(1, ge=1, le=65_536)
    """Micro-batches accumulated per optimizer step; global batch = micro x accum x world size (derived from global_batch_size when that is set)."""
    # Unset, it is left out of the dump that stage fingerprints hash (`run.fingerprint.section_hash`), so
    # a recipe without it keeps the hashes finished runs recorded (tests/run/test_fingerprint_pins.py).
    global_batch_size: int | None = Field(None, ge=1, le=MAX_GLOBAL_BATCH, exclude_if=lambda value: value is None)
    """Sequences per optimizer step over all ranks, the same on any world size: grad_accum_steps is derived as
    global_batch_size / (micro_batch_size x world size), which must divide it; None: micro x accum x world
    size (grows with the world)."""
    seq_len: int = Field(512, ge=8, le=1_048_576)
    """Tokens per training sequence."""
    trainable: list[str] | None = Field(None, min_length=1)
    """Parameters that train: ["all"] or globs over names (`re:` prefix: regex); None: stage default."""
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    """AdamW settings."""
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    """Learning-rate schedule."""
    grad_clip: float = Field(1.0, ge=0, le=1_000_000)
    """Clip the global gradient norm to this value (0: no clipping)."""
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    """Checkpoint frequency and retention."""
    log_every: int = Field(10, ge=1, le=MAX_STEPS)
    """Write metrics (console, metrics.jsonl, TensorBoard) every this many steps."""
    validation: ValidationConfig = Field(default_factory=ValidationConfig)
    """Held-out loss and bits per byte per language during training (off unless every_steps is set)."""
    loggers: list[Literal["tensorboard", "wandb", "mlflow"]] = Field(default_factory=lambda: ["tensorboard"])
    """Scalar loggers beside metrics.jsonl: tensorboard, wandb (WANDB_* env), mlflow (MLFLOW_TRACKING_URI)."""
    profile_steps: tuple[int, int] | None = None
    """Write a torch profiler trace of steps [first, last] (rank 0) to <stage>/profile; None: off."""
    max_nonfinite_steps: int = Field(5, ge=1, le=MAX_STEPS)
    """A NaN/inf loss skips the step; this many in a row stop the run with an error."""
    mixture: dict[str, MixtureEntry] | None = None
    """Per-source overrides ({source: {weight: .., epochs: .., max_epochs: ..}}); None: the recipe's data weights."""
    replay: float | None = Field(None, ge=0, lt=1)
    """This stage's share of tokens from the `role: replay` sources (see data.replay, which it overrides;
    applied after `mixture`); not inherited by stage 2, like mixture. Anchors: 1-5% small shifts, up to ~25%
    for a new language (Ibrahim et al. 2024); Poro 2: 30% English + 30% code + 10% math, -1.1 English
    points."""
    replay_distillation: float = Field(0.0, ge=0, le=100, exclude_if=lambda value: value == 0.0)
    """Weight of a KL term that keeps the model's predictions on the replay samples (`role: replay`)
    at the starting model's (the embeddings stage's model, over the tokens whose head rows came from
    the base), per replayed token beside its cross-entropy; 0: off. The teacher runs on every replay
    row (a forward pass more on the replay share; each rank holds it whole) and its micro-batches use
    the logits, not the fused loss. On the demo's extension at 20% replay, 2 took English from +6.6%
    to +1.5% vs the base with Bokmål level (benchmarks/README.md frontier, session 22). Needs the
    embeddings stage's shared rows (not `init: scratch`). Unset (0) it is not in the recipe's dump,
    so stage fingerprints made before it hold."""
    zero_stage: int | None = Field(None, ge=0, le=3)
    """This stage's DeepSpeed ZeRO stage, overriding engine.zero_stage (e.g. 1 for stage 1)."""
    train_rows: Literal["all", "new"] = "all"
    """Embedding/head rows that train: all, or new (the rows the embeddings stage copied from the base keep
    its values bit for bit; no weight decay on those matrices then; set per stage, stage2 does not inherit
    it)."""

    @model_validator(mode="after")
    def _warmup_within_steps(self) -> TrainStageConfig:
        """A warm-up the user set longer than the stage never reaches the peak LR the recipe names.
        (The default 10 is left alone: a 3-step test stage did not ask for it.)"""
        warmup = self.schedule.warmup_steps
        if self.enabled and "warmup_steps" in self.schedule.model_fields_set and warmup > self.steps:
            raise FieldProblem(("schedule", "warmup_steps"), f"{warmup} warm-up steps is more than this stage's "
                               f"steps ({self.steps}): the LR would never reach optimizer.lr; lower it or raise steps")
        return self

    @model_validator(mode="after")
    def _global_batch_divides(self) -> TrainStageConfig:
        """What no world size can fix, refused at load: a global batch that is not a whole number of
        micro batches, or of micro batches x an explicit grad_accum_steps. The world size is known
        only where the stage runs; `planning.training.grad_accum` checks it there."""
        total, micro = self.global_batch_size, self.micro_batch_size
        if total is None:
            return self
        if total % micro:
            raise FieldProblem(("global_batch_size",), f"{total} sequences is not a multiple of micro_batch_size "
                               f"({micro}): no world size splits it into whole micro batches")
        per_rank = micro * self.grad_accum_steps
        if "grad_accum_steps" in self.model_fields_set and total % per_rank:
            raise FieldProblem(("grad_accum_steps",), f"{self.grad_accum_steps} contradicts global_batch_size "
                               f"{total}: micro_batch_size {micro} x {self.grad_accum_steps} = {per_rank} sequences per "
                               "rank does not divide it on any world size; remove grad_accum_steps (derived from "
                               "global_batch_size)")
        return self

    @model_validator(mode="after")
    def _profile_range(self) -> TrainStageConfig:
        if self.profile_steps is not None and not 1 <= self.profile_steps[0] <= self.profile_steps[1]:
            raise ValueError(f"profile_steps {list(self.profile_steps)}: need 1 <= first <= last")
        return self

    @model_validator(mode="after")
    def _new_rows_without_embedding_decay(self) -> TrainStageConfig:
        """`train_rows: new` exempts the embedding matrices from weight decay (langadapt.train.rows says
        why); a recipe that asks for their decay explicitly would be silently overruled."""
        if self.train_rows == "new" and self.optimizer.decay_embeddings \
                and "decay_embeddings" in self.optimizer.model_fields_set:
            raise FieldProblem(("optimizer", "decay_embeddings"), "true contradicts train_rows: new, which keeps "
                               "the shared rows exactly and so cannot decay them; remove it")
        return self

    @property
    def optimizer_in_force(self) -> OptimizerConfig:
        """`optimizer` as the engines build AdamW with it: under `train_rows: new` without weight decay
        on the embedding matrices (langadapt.train.rows)."""
        if self.train_rows == "new":
            return self.optimizer.model_copy(update={"decay_embeddings": False})
        return self.optimizer

    def trainable_patterns(self, stage_name: str) -> list[str]:
        """The patterns in force: as set, else embeddings + head for stage1 and all for stage2."""
        if self.trainable is not None:
            return self.trainable
        return list(EMBEDDING_PATTERNS) if stage_name == "stage1" else ["all"]


AttentionKernel = Literal["sdpa", "eager", "flash_attention_2", "flash_attention_3", "flash_attention_4", "flex_attention"]
"""The `attn_implementation` names transformers 5 accepts for training (its AttentionInterface and
"eager"; 5.24 registers exactly these). Its other values are for generation (`paged|eager`) or load a
kernel from the Hub (`org/repo`), which a training recipe does not; a typo is refused at load instead
of in `from_pretrained`, after the CPU stages and the queue."""


class FSDPConfig(Config):
    """FSDP2 settings (engine.kind: fsdp); see langadapt.train.engines.fsdp_engine."""

    reshard_after_forward: bool = True
    """Free each gathered block after forward, gather it again in backward (false: keep it, more memory, fewer all-gathers)."""
    cpu_offload: bool = False
    """Keep the sharded weights, gradients and optimizer state in host memory; AdamW steps on the CPU."""


class EngineConfig(Config):
    """How the model is run: plain PyTorch (DDP when multi-process), DeepSpeed ZeRO, or FSDP2."""

    kind: Literal["torch", "deepspeed", "fsdp"] = "torch"
    """Engine: `torch` (AdamW, autocast, DDP), `deepspeed` (deepspeed.initialize, ZeRO) or `fsdp` (FSDP2 fully_shard)."""
    zero_stage: int = Field(0, ge=0, le=3)
    """DeepSpeed ZeRO stage 0-3 (needs kind: deepspeed); a stage may override it."""
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    """Compute precision: bf16 (autocast / DeepSpeed bf16), fp16 (loss scaling; GPUs only), fp32."""
    activation_checkpointing: bool = False
    """Recompute activations in backward (HF gradient checkpointing) to save memory."""
    attn_implementation: AttentionKernel = "sdpa"
    """transformers attention kernel: sdpa, eager, flash_attention_2/3/4 (flash-attn installed, GPUs) or flex_attention."""
    deepspeed_config: dict[str, Any] | None = None
    """Raw DeepSpeed JSON merged under ours; a key that contradicts a recipe value is an error. Under bf16 and
    ZeRO 1-3 gradients accumulate and reduce in fp32 unless it sets data_types.grad_accum_dtype /
    communication_data_type."""
    fsdp: FSDPConfig = Field(default_factory=FSDPConfig)
    """FSDP2 settings (needs kind: fsdp)."""
    compile: bool | Literal["auto"] = "auto"
    """torch.compile each decoder block in place (regional); auto: on GPUs where it has run (planning.gpu_record)."""
    fused_loss: bool | Literal["auto"] = "auto"
    """Fused head + cross-entropy (liger-kernel), no full logits; auto: on GPUs where it has run (planning.gpu_record)."""
    peak_tflops: float | None = Field(None, gt=0, le=100_000)
    """Peak TFLOP/s per device for MFU when the device is not in the built-in table."""

    @property
    def is_zero3(self) -> bool:
        """DeepSpeed ZeRO-3: the weights are partitioned, so loading and releasing the model differ."""
        return self.kind == "deepspeed" and self.zero_stage == 3


MONITORING_KEYS = ("checkpoint", "log_every", "loggers", "validation", "profile_steps")
"""Training-stage keys that change how a run is watched and saved, not the model it trains: out of
the fingerprint, so that editing them (checkpoint more often, another logger) resumes a stage from
its checkpoints instead of discarding its partial work, and a new key of this kind with a default
does not re-run finished stages."""


@dataclass(frozen=True)
class TrainingSlice:
    """What a training stage reads of the recipe."""

    name: str = reads(why="the stage's name, stage1 or stage2 (its section is `config`)")
    """stage1 or stage2."""
    config: TrainStageConfig = reads("{name}", ignores=tuple(f"{{name}}.{key}" for key in MONITORING_KEYS))
    engine: EngineConfig = reads("engine", at_default=("engine.peak_tflops",))  # MFU column only: not in the print
    mixture: dict[str, dict] | None = reads("data.sources[].name", *(f"data.sources[].{key}" for key in TRAINING_SOURCE_FIELDS),
                                            "data.replay", default=None)
    """The data mixture with this stage's overrides and replay share applied (recipe.replay.stage_mixture).
    The sources' roles, which the replay share reads, are in the data stage's print, which the chain carries."""
    after_stage1: bool = reads(why="whether stage 1 runs: stage 1's print, which stage 2's chains", default=False)
    """Start from stage1/model (stage 2 of a run whose stage 1 is enabled), else from embeddings/model."""
    force_epochs: bool = reads("data.force_epochs", default=False)
    """The recipe's data.force_epochs: more than 16 epochs of a source, as `langadapt plan` and preflight assume."""
    document_masking: bool = reads("data.document_masking", default=False)
    """The recipe's data.document_masking: attention stays inside each packed document."""

