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
        raise LangadaptError.at(zkey, f"ZeRO stage {zero} needs engine.kind: deepspeed (torch runs DDP)")
    if engine.kind == "fsdp" and zero > 0:  # kept valid, so switching a recipe's engine is one --set
        log.warning("%s: ZeRO stage %d is DeepSpeed's; ignored by engine.kind: fsdp, which shards "
                    "weights, gradients and optimizer state (ZeRO-3's layout)", zkey, zero)
        zero = 0
    if engine.precision == "fp16" and device_type == "cpu":
        raise LangadaptError.at("engine.precision", "fp16 needs a GPU; use bf16 or fp32 on CPU")
    _check_fsdp(engine)
    _check_gradient_dtype(engine, zero, zkey)
    if zero == 3 and engine.activation_checkpointing and trainable_kind(stage_name, stage) != "all":
        _check_zero3_recompute(zkey, stage_name)
    if engine.attn_implementation.startswith("flash_attention") and device_type == "cpu":
        raise LangadaptError.at("engine.attn_implementation", f"{engine.attn_implementation} needs a GPU")
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
        raise LangadaptError.at("engine.deepspeed_config.data_types.grad_accum_dtype", f"{accum} under {zkey} 0 with "
                                f"engine.precision {engine.precision}: DeepSpeed accumulates in another dtype only "
                                "with ZeRO 1-3; use a ZeRO stage, or engine.kind: torch (fp32 gradients)")


def _check_fsdp(engine: EngineConfig) -> None:
    """engine.fsdp only with kind fsdp (a setting that would be silently ignored is refused); no fp16."""
    if engine.kind != "fsdp":
        changed = sorted(engine.fsdp.model_dump().items() - FSDPConfig().model_dump().items())
        if changed:
            raise LangadaptError.at(f"engine.fsdp.{changed[0][0]}", f"set, but engine.kind is {engine.kind!r}; "
                                    "use engine.kind: fsdp or remove it")
    elif engine.precision == "fp16":
        raise LangadaptError.at("engine.precision", "fp16 is not supported with engine.kind: fsdp (no loss scaler "
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
        raise LangadaptError.at("engine.fused_loss",
                                "liger-kernel's Triton kernels need a GPU; use auto or false on CPU")
    if engine.fused_loss is True and not have_liger:
        raise LangadaptError.at("engine.fused_loss", "liger-kernel is not installed (pip install 'langadapt[gpu]')")
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
        raise LangadaptError.at(zkey, f"ZeRO-3 with a frozen body ({stage_name}.trainable) and "
                                f"engine.activation_checkpointing needs deepspeed>={ZERO3_FROZEN_RECOMPUTE} "
                                f"(installed: {installed}; "
                                "older releases fail the recompute with CheckpointError); upgrade it, or use ZeRO-1/2 "
                                "for this stage")


def grad_accum(stage: TrainStageConfig, world_size: int, stage_name: str = "stage") -> int:
    """Micro-batches each rank accumulates per optimizer step on `world_size` ranks.

    With `global_batch_size` unset, `grad_accum_steps` as set (the global batch then grows with the
    world). Set, it is derived: global_batch_size / (micro_batch_size x world_size), so the recipe
    trains the same batch and token budget on any allocation (LitGPT's `global_batch_size`,
    torchtitan's and OLMo-core's do the same). A world size that does not divide it, or an explicit
    grad_accum_steps that disagrees with it, is one error line naming the key and the numbers
    (`stage_name` prefixes the key; preflight's report locates it at the recipe line)."""
    total, micro = stage.global_batch_size, stage.micro_batch_size
    if total is None:
        return stage.grad_accum_steps
    per_pass = micro * world_size
    if total % per_pass:
        raise LangadaptError.at(f"{stage_name}.global_batch_size",
                                f"{total} sequences does not split over world size {world_size}: micro_batch_size "
                                f"{micro} x {world_size} ranks = {per_pass} sequences per micro-step does not "
                                f"divide it; use a multiple of {per_pass}, or a world size that divides "
                                f"{total // micro}")
    derived = total // per_pass
    if "grad_accum_steps" in stage.model_fields_set and stage.grad_accum_steps != derived:
        raise LangadaptError.at(f"{stage_name}.grad_accum_steps",
                                f"{stage.grad_accum_steps} contradicts global_batch_size {total} on world size "
                                f"{world_size}, which needs {derived} (= {total} / (micro_batch_size {micro} x "
                                f"{world_size} ranks)); remove grad_accum_steps: it is derived from global_batch_size")
    return derived


def global_batch(stage: TrainStageConfig, world_size: int, stage_name: str = "stage") -> int:
    """Sequences per optimizer step over `world_size` ranks: micro batch x accumulation x ranks
    (`global_batch_size` when set; `grad_accum` derives the accumulation and refuses a world that
    does not divide it).

    The one formula: `resolve_training` stores it in `TrainingSettings.global_batch`, and what has
    no resolved settings (preflight, the DeepSpeed config, the cold twin) calls it directly."""
    return stage.micro_batch_size * grad_accum(stage, world_size, stage_name) * world_size


def world_size_warning(stage_name: str, stage: TrainStageConfig, planned_world: int, world_size: int) -> str | None:
    """The warning for a stage whose global batch follows the world, run on another world than the
    recipe's cluster section plans (`langadapt plan`'s numbers, the token budget its comments quote);
    None when `global_batch_size` fixes the batch or the worlds agree."""
    if stage.global_batch_size is not None or planned_world == world_size:
        return None
    planned, actual = global_batch(stage, planned_world), global_batch(stage, world_size)
    ranks = f"{planned_world} rank" + ("s" if planned_world != 1 else "")
    return (f"{stage_name}: the global batch is {actual:,} sequences on this world of {world_size} ranks, not the "
            f"{planned:,} the recipe's cluster plans ({ranks}; micro_batch_size {stage.micro_batch_size} "
            f"x grad_accum_steps {stage.grad_accum_steps} x world size), so the stage trains {actual / planned:g}x "
            f"the planned tokens; set {stage_name}.global_batch_size: {planned} to train the planned batch on any "
            "world size")


def world_change_line(stage_name: str, stage: TrainStageConfig, checkpoint: object, saved_samples: int,
                      samples: int, world_size: int) -> str:
    """Why a checkpoint's data stream does not fit this run when its total samples differ: the global
    batch changed (steps x global batch is the stream's length; the steps and the batch keys are in the
    stage's fingerprint, so on a resume only the world size can have changed it). One line: the cause,
    both batches, both world sizes where they follow, and the fix."""
    steps = stage.steps
    old, new = saved_samples / steps, samples / steps
    per_rank = stage.micro_batch_size * stage.grad_accum_steps
    worlds = (f"world size {int(old // per_rank)} -> {world_size}"
              if stage.global_batch_size is None and old == int(old) and int(old) % per_rank == 0
              else f"world size now {world_size}")
    return (f"{stage_name}: cannot resume {checkpoint}: the global batch changed: {old:,.0f} -> {new:,.0f} sequences "
            f"({worlds}; micro_batch_size x grad_accum_steps x world size), so its data stream no longer fits; "
            f"resume on the world size it was saved with, or set {stage_name}.global_batch_size to fix the batch "
            "on any world size (the stage then trains again from its start)")


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
    global_batch_fixed: bool = False
    """The recipe sets `global_batch_size`: grad_accum was derived from it for this world."""

    def as_dict(self) -> dict[str, Any]:
        """The settings `plan --json` reports and the stage's summary records."""
        return {"engine": self.engine.kind, "zero_stage": self.engine.zero_stage, "world_size": self.world_size,
                "micro_batch": self.micro_batch, "grad_accum": self.grad_accum, "global_batch": self.global_batch,
                "global_batch_fixed": self.global_batch_fixed,
                "seq_len": self.seq_len, "trainable": self.trainable, "precision": self.engine.precision,
                "compile": self.engine.compile, "fused_loss": self.engine.fused_loss,
                "activation_checkpointing": self.engine.activation_checkpointing,
                "attn_implementation": self.engine.attn_implementation}


def resolve_training(stage_name: str, stage: TrainStageConfig, engine: EngineConfig, world_size: int,
                     device_type: str, have_liger: bool | None = None,
                     planned_world_size: int | None = None) -> TrainingSettings:
    """The settings training stage `stage_name` runs with on `world_size` ranks of `device_type`.

    The training stage calls it with the world it finds (and whether liger-kernel is installed
    there); `langadapt plan` with the recipe's cluster (GPUs, the `gpu` extra installed). Every
    derived value goes through here, so a plan is what training will do. `planned_world_size`
    (the recipe's cluster, which the run's preflight passes): warn when the global batch follows
    the world and this world is another (`world_size_warning`).
    """
    resolved = check_engine(stage_name, stage, engine, device_type, have_liger)
    accum = grad_accum(stage, world_size, stage_name)
    if planned_world_size is not None and (warning := world_size_warning(stage_name, stage, planned_world_size,
                                                                         world_size)):
        log.warning("%s", warning)
    return TrainingSettings(stage_name, resolved, world_size, stage.micro_batch_size, accum,
                            global_batch(stage, world_size, stage_name), stage.seq_len,
                            trainable_kind(stage_name, stage), stage.global_batch_size is not None)
