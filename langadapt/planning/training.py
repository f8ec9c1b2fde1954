"""What a training stage runs with on a given world: its recipe slice checked and resolved, once.

`check_engine` refuses the combinations known to fail, at start-up rather than as a crash after the
queue wait. `resolve_training` is the one place the derived settings (global batch, ZeRO stage,
compile, fused loss, ...) come from: the training stage runs what it returns (`train.job`) and
`langadapt plan` and the preflight check report it, so they cannot disagree.
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass
from typing import Any, Literal

from langadapt.errors import LangadaptError
from langadapt.recipe.train import EngineConfig, FSDPConfig, TrainStageConfig

log = logging.getLogger("langadapt.train")


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
    if zero == 3 and engine.activation_checkpointing and trainable_kind(stage_name, stage) != "all":
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
    suite has run it (`planning.gpu_record`, from tests/gpu/RESULTS.md); elsewhere it stays off with a
    warning naming the setting that opts in. Both are built to work everywhere (CPU-tested on two
    ranks with a stand-in of liger's kernel, tests/train/test_train_multiprocess_zero.py): FSDP2's
    hooks are excluded from tracing and its head sits in the root group, whose weights stay gathered
    where the fused loss reads them; under ZeRO-3 the head's weight is a DeepSpeed external parameter
    of the loss module and only each block's forward is compiled, so no parameter fetch is traced.
    """
    from langadapt.planning.gpu_record import layout_name, ran_on_gpu

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
    """Sequences per optimizer step over `world_size` ranks: micro batch x accumulation x ranks.

    The one formula: `resolve_training` stores it in `TrainingSettings.global_batch`, and what has
    no resolved settings (preflight, the DeepSpeed config, the cold twin) calls it directly."""
    return stage.micro_batch_size * stage.grad_accum_steps * world_size


def trainable_kind(stage_name: str, stage: TrainStageConfig) -> Literal["embeddings", "all"]:
    """What trains, as planning counts it: 'all', or 'embeddings' for any narrower `trainable`
    (the body frozen: FLOPs and memory count only the embedding and head matrices as training).

    The one reading of a stage's `trainable` outside the live model (where `train.policy` matches
    the patterns themselves): the resolver, the ZeRO-3 recompute check and the cold twin's
    equal-compute FLOPs all call it, so a recipe whose stage 2 freezes the body is costed as such."""
    return "all" if stage.trainable_patterns(stage_name) == ["all"] else "embeddings"


@dataclass(frozen=True)
class TrainingSettings:
    """What one training stage really runs with on a given world: derived once, by `resolve_training`."""

    stage: str
    engine: EngineConfig
    """The engine after `check_engine`: this stage's ZeRO stage applied, compile and fused_loss as booleans."""
    world_size: int
    micro_batch: int
    grad_accum: int
    global_batch: int
    """Sequences per optimizer step over all ranks (`global_batch`)."""
    seq_len: int
    trainable: Literal["embeddings", "all"]
    """`trainable_kind`: 'all', or 'embeddings' for any narrower selection (the body frozen)."""

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
    return TrainingSettings(stage_name, resolved, world_size, stage.micro_batch_size, stage.grad_accum_steps,
                            global_batch(stage, world_size), stage.seq_len, trainable_kind(stage_name, stage))
