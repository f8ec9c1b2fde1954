"""Config slices of the training stages: optimizer, schedule, checkpoints, the stage, the engine.

Both stages use `TrainStageConfig` (the recipe's `stage1` and `stage2` sections; stage 2 inherits
what stage 1 sets, see `langadapt.recipe`); they differ in `trainable`, whose default depends on
the stage (stage 1: input embeddings + LM head; stage 2: everything). `EngineConfig` is shared
by both stages; `check_engine` refuses the combinations known to fail, at start-up rather than
as a crash after the queue wait. `resolve_training` is the one place the derived settings
(global batch, ZeRO stage, compile, fused loss, ...) come from: the training stage runs what it
returns and `langadapt plan` reports it, so the two cannot disagree.
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from langadapt.errors import LangadaptError
from langadapt.recipe.base import Config, FieldProblem
from langadapt.recipe.languages import LanguageCode

log = logging.getLogger("langadapt.train")

MAX_STEPS = 1_000_000_000
"""Upper bound of every step count: past any real run, far below where arithmetic on it misbehaves."""

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

    weight: float | None = Field(None, ge=0)
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
    """Run this stage; a disabled stage writes only a note and stage 2 starts from the embeddings."""
    steps: int = Field(100, ge=1, le=MAX_STEPS)
    """Optimizer steps."""
    micro_batch_size: int = Field(8, ge=1, le=65_536)
    """Sequences per device per forward/backward."""
    grad_accum_steps: int = Field(1, ge=1, le=65_536)
    """Micro-batches accumulated per optimizer step; global batch = micro x accum x world size."""
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
    """This stage's share of tokens from the `role: replay` sources (see data.replay, which it overrides; applied after `mixture`); not inherited by stage 2, like mixture. Anchors: 1-5% small shifts, up to ~25% for a new language (Ibrahim et al. 2024); Poro 2: 30% English + 30% code + 10% math, -1.1 English points."""
    zero_stage: int | None = Field(None, ge=0, le=3)
    """This stage's DeepSpeed ZeRO stage, overriding engine.zero_stage (e.g. 1 for stage 1)."""
    train_rows: Literal["all", "new"] = "all"
    """Embedding/head rows that train: all, or new (the rows the embeddings stage copied from the base keep its values bit for bit; no weight decay on those matrices then; set per stage, stage2 does not inherit it)."""

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
    attn_implementation: str = "sdpa"
    """transformers attention kernel: sdpa, eager, flash_attention_2, ..."""
    deepspeed_config: dict[str, Any] | None = None
    """Raw DeepSpeed JSON merged under ours; a key that contradicts a recipe value is an error. Under bf16 and ZeRO 1-3 gradients accumulate and reduce in fp32 unless it sets data_types.grad_accum_dtype / communication_data_type."""
    fsdp: FSDPConfig = Field(default_factory=FSDPConfig)
    """FSDP2 settings (needs kind: fsdp)."""
    compile: bool | Literal["auto"] = "auto"
    """torch.compile each decoder block in place (regional); auto: on GPUs where it has run (train.gpu_record)."""
    fused_loss: bool | Literal["auto"] = "auto"
    """Fused head + cross-entropy (liger-kernel), no full logits; auto: on GPUs where it has run (train.gpu_record)."""
    peak_tflops: float | None = Field(None, gt=0, le=100_000)
    """Peak TFLOP/s per device for MFU when the device is not in the built-in table."""


def check_engine(
    stage_name: str, stage: TrainStageConfig, engine: EngineConfig, device_type: str,
    have_liger: bool | None = None,
) -> EngineConfig:
    """The engine config this stage really runs with; refuses the known-bad combinations.

    Returns a copy with the stage's ZeRO stage applied (FSDP ignores one, with a warning), compile
    and fused loss resolved; raises LangadaptError naming the recipe keys otherwise. ZeRO-3 runs
    as asked also for a frozen body (stage 1): which layout is fastest where is `langadapt plan`'s
    recommendation, not a silent change here (a 70B body would not fit ZeRO-2's whole weights).
    """
    zero = engine.zero_stage if stage.zero_stage is None else stage.zero_stage
    zkey = f"{stage_name}.zero_stage" if stage.zero_stage is not None else "engine.zero_stage"
    if engine.kind == "torch" and zero > 0:
        raise LangadaptError(f"{zkey}: ZeRO stage {zero} needs engine.kind: deepspeed (torch runs DDP)")
    if engine.kind == "fsdp" and zero > 0:  # kept valid, so switching a recipe's engine is one --set
        log.warning("%s: ZeRO stage %d is DeepSpeed's; ignored by engine.kind: fsdp, which shards "
                    "weights, gradients and optimizer state (ZeRO-3's layout)", zkey, zero)
        zero = 0
    if engine.precision == "fp16" and device_type == "cpu":
        raise LangadaptError("engine.precision: fp16 needs a GPU; use bf16 or fp32 on CPU")
    _check_fsdp(engine)
    _check_gradient_dtype(engine, zero, zkey)
    if zero == 3 and engine.activation_checkpointing and stage.trainable_patterns(stage_name) != ["all"]:
        _check_zero3_recompute(zkey, stage_name)
    if engine.attn_implementation.startswith("flash_attention") and device_type == "cpu":
        raise LangadaptError(f"engine.attn_implementation: {engine.attn_implementation} needs a GPU")
    return engine.model_copy(update={"zero_stage": zero, **_fast_path(engine, zero, device_type, have_liger)})


DTYPE_NAMES = {"fp32": {"fp32", "float32", "float"}, "bf16": {"bf16", "bfloat16"}, "fp16": {"fp16", "float16", "half"}}
"""The names DeepSpeed's config accepts for each engine.precision (its DtypeEnum)."""


def _check_gradient_dtype(engine: EngineConfig, zero: int, zkey: str) -> None:
    """DeepSpeed accumulates gradients in another dtype than the model's only through a ZeRO
    optimizer: without one, its initialize fails (NotImplementedError) after the earlier stages ran."""
    raw = (engine.deepspeed_config or {}).get("data_types") or {}
    accum = raw.get("grad_accum_dtype") if isinstance(raw, dict) else None
    if engine.kind == "deepspeed" and zero == 0 and accum is not None \
            and str(accum).removeprefix("torch.") not in DTYPE_NAMES[engine.precision]:
        raise LangadaptError(f"engine.deepspeed_config.data_types.grad_accum_dtype: {accum} under {zkey} 0 with "
                             f"engine.precision {engine.precision}: DeepSpeed accumulates in another dtype only "
                             "with ZeRO 1-3; use a ZeRO stage, or engine.kind: torch (fp32 gradients)")


def _check_fsdp(engine: EngineConfig) -> None:
    """engine.fsdp only with kind fsdp (a setting that would be silently ignored is refused); no fp16."""
    if engine.kind != "fsdp":
        changed = sorted(engine.fsdp.model_dump().items() - FSDPConfig().model_dump().items())
        if changed:
            raise LangadaptError(f"engine.fsdp.{changed[0][0]}: set, but engine.kind is {engine.kind!r}; "
                                 "use engine.kind: fsdp or remove it")
    elif engine.precision == "fp16":
        raise LangadaptError("engine.precision: fp16 is not supported with engine.kind: fsdp (no loss scaler "
                             "for sharded gradients here); use bf16")


def liger_available() -> bool:
    """Whether liger-kernel is installed (the `gpu` extra); found without importing it or torch."""
    return importlib.util.find_spec("liger_kernel") is not None


def fused_loss_runs_on(device_type: str) -> bool:
    """liger-kernel's Triton kernels run on CUDA and ROCm GPUs, not on CPU."""
    return device_type != "cpu"


def _fast_path(engine: EngineConfig, zero: int, device_type: str, have_liger: bool | None = None) -> dict[str, bool]:
    """`compile` and `fused_loss` resolved to booleans for this device (see langadapt.train.fastpath).

    auto is off on CPU, where compile time outweighs the gain of a short run and liger's Triton
    kernels do not run. On a GPU auto turns a fast path on only under an engine layout where the GPU
    suite has run it (`train.gpu_record`, from tests/gpu/RESULTS.md); elsewhere it stays off with a
    warning naming the setting that opts in. Both are built to work everywhere (CPU-tested on two
    ranks with a stand-in of liger's kernel, tests/train/test_train_multiprocess_zero.py): FSDP2's
    hooks are excluded from tracing and its head sits in the root group, whose weights stay gathered
    where the fused loss reads them; under ZeRO-3 the head's weight is a DeepSpeed external parameter
    of the loss module and only each block's forward is compiled, so no parameter fetch is traced.
    """
    from langadapt.train.gpu_record import layout_name, ran_on_gpu

    gpu, kernels_run = device_type != "cpu", fused_loss_runs_on(device_type)
    have_liger = liger_available() if have_liger is None else have_liger
    if engine.fused_loss is True and not kernels_run:
        raise LangadaptError("engine.fused_loss: liger-kernel's Triton kernels need a GPU; use auto or false on CPU")
    if engine.fused_loss is True and not have_liger:
        raise LangadaptError("engine.fused_loss: liger-kernel is not installed (pip install 'langadapt[gpu]')")
    resolved = {"compile": engine.compile, "fused_loss": engine.fused_loss}
    for path in ("compile", "fused_loss"):
        if resolved[path] != "auto":
            continue
        runs_here = gpu and (path == "compile" or (kernels_run and have_liger))
        resolved[path] = runs_here and ran_on_gpu(path, engine.kind, zero) is not None  # type: ignore[arg-type]
        if runs_here and not resolved[path]:
            log.warning("engine.%s: auto leaves it off under %s: it has not run on a GPU under this layout "
                        "yet (tests/gpu/RESULTS.md); set engine.%s: true to opt in", path,
                        layout_name(engine.kind, zero), path)
    if engine.fused_loss == "auto" and kernels_run and not have_liger:
        log.info("engine.fused_loss: auto, but liger-kernel is not installed: full logits are materialised")
    return resolved  # type: ignore[return-value]


ZERO3_FROZEN_RECOMPUTE = "0.19.8"
"""The first DeepSpeed known to recompute checkpointed activations of FROZEN parameters under ZeRO-3:
0.19.2 partitioned them again during the recompute, and torch's checkpoint refused the [0]-shaped
tensors ("CheckpointError: Recomputed values ... have different metadata"; transformers #47254,
fixed by DeepSpeed PR #8148). 0.19.8 is the release tested here (stage 1 on two CPU ranks,
tests/train/test_train_multiprocess_nodes.py); releases between are not known either way."""


def _check_zero3_recompute(zkey: str, stage_name: str) -> None:
    """ZeRO-3 + activation checkpointing + a frozen body needs a DeepSpeed with the recompute fix."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.version import Version

    try:
        installed = version("deepspeed")
    except PackageNotFoundError:  # `plan` on a laptop: the training machine's DeepSpeed is checked there
        return
    if Version(installed) < Version(ZERO3_FROZEN_RECOMPUTE):
        raise LangadaptError(f"{zkey}: ZeRO-3 with a frozen body ({stage_name}.trainable) and "
                             f"engine.activation_checkpointing needs deepspeed>={ZERO3_FROZEN_RECOMPUTE} "
                             f"(installed: {installed}; "
                             "older releases fail the recompute with CheckpointError); upgrade it, or use ZeRO-1/2 "
                             "for this stage")


def global_batch(stage: TrainStageConfig, world_size: int) -> int:
    """Sequences per optimizer step over `world_size` ranks: micro batch x accumulation x ranks."""
    return stage.micro_batch_size * stage.grad_accum_steps * world_size


@dataclass(frozen=True)
class TrainingSettings:
    """What one training stage really runs with on a given world: derived once, by `resolve_training`."""

    stage: str
    engine: EngineConfig
    """The engine after `check_engine`: this stage's ZeRO stage applied, compile and fused_loss as booleans."""
    world_size: int
    micro_batch: int
    grad_accum: int
    seq_len: int
    trainable: Literal["embeddings", "all"]
    """'all', or 'embeddings' for any narrower selection (the body frozen)."""

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step over all ranks."""
        return self.micro_batch * self.grad_accum * self.world_size

    def as_dict(self) -> dict[str, Any]:
        """The settings `plan --json` reports and the stage's summary records."""
        return {"engine": self.engine.kind, "zero_stage": self.engine.zero_stage, "world_size": self.world_size,
                "micro_batch": self.micro_batch, "grad_accum": self.grad_accum, "global_batch": self.global_batch,
                "seq_len": self.seq_len, "trainable": self.trainable, "precision": self.engine.precision,
                "compile": self.engine.compile, "fused_loss": self.engine.fused_loss,
                "activation_checkpointing": self.engine.activation_checkpointing,
                "attn_implementation": self.engine.attn_implementation}


def resolve_training(stage_name: str, stage: TrainStageConfig, engine: EngineConfig, world_size: int,
                     device_type: str, have_liger: bool | None = None) -> TrainingSettings:
    """The settings training stage `stage_name` runs with on `world_size` ranks of `device_type`.

    The training stage calls it with the world it finds (and whether liger-kernel is installed
    there); `langadapt plan` with the recipe's cluster (GPUs, the `gpu` extra installed). Every
    derived value goes through here, so a plan is what training will do.
    """
    resolved = check_engine(stage_name, stage, engine, device_type, have_liger)
    trainable = "all" if stage.trainable_patterns(stage_name) == ["all"] else "embeddings"
    return TrainingSettings(stage_name, resolved, world_size, stage.micro_batch_size, stage.grad_accum_steps,
                            stage.seq_len, trainable)
