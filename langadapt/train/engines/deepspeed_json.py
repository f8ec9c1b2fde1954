"""The DeepSpeed JSON of a training stage: the recipe's raw passthrough with our values filled in.

Apart from the engine (`deepspeed_engine`) so that `train.job.TrainingJob` builds it once, when the
job is resolved, without importing the engine (which imports the job): the builder needs only the
recipe's slices. A raw value that contradicts one of ours is an error naming both keys, never a
silent winner.
"""

from __future__ import annotations

from typing import Any

from langadapt.errors import LangadaptError
from langadapt.planning.training import global_batch, grad_accum
from langadapt.recipe.train import EngineConfig, TrainStageConfig

FP32_GRADIENTS = {"data_types.grad_accum_dtype": "fp32", "communication_data_type": "fp32"}
"""Under bf16, gradients are accumulated over micro-steps and reduced across ranks in fp32, as the
torch engine's fp32 gradients are (DDP reduces them as they are) and FSDP2's (`reduce_dtype`), and
as Megatron-LM forces for bf16 (`accumulate_allreduce_grads_in_fp32`). DeepSpeed's default under
bf16 does both in bf16: measured on CPU (tiny Llama, 2 ranks, ZeRO-1/2/3), the gradient of 16
accumulated micro-steps lay 4.2e-3 to 4.3e-3 (relative norm) from the exact sum of the same
micro-gradients, against 2.7e-9 with fp32 (tests/train/test_train_deepspeed_precision.py); one
micro-step reduced in bf16 over 2 ranks alone was 1.3e-3 off. The cost: fp32
gradient partitions (ZeRO-2/3: 4 bytes per parameter over the ranks instead of 2; ZeRO-1 keeps a
whole fp32 copy beside the bf16 gradients, DeepSpeed's BF16_Optimizer) and twice the bytes in the
gradient reduction; `planning.memory` counts them. Not under ZeRO-0: DeepSpeed has no fp32
accumulation without a ZeRO optimizer (the torch engine is the unsharded path)."""
BF16_GRADIENTS = {"data_types": {"grad_accum_dtype": "bf16"}, "communication_data_type": "bf16"}
"""What `engine.deepspeed_config` sets to keep DeepSpeed's own bf16 accumulation and reduction
(half the reduced bytes, less exact: see FP32_GRADIENTS)."""

def deepspeed_config(stage: TrainStageConfig, stage_name: str, engine: EngineConfig, world_size: int) -> dict:
    """The DeepSpeed JSON: the raw passthrough with our values filled in, conflicts refused.

    A training stage builds it once, as `TrainingJob.deepspeed_config`; ZeRO-3 loading and
    `DeepSpeedEngine` read that field rather than calling this again."""
    accum_from = (f"{stage_name}.grad_accum_steps" if stage.global_batch_size is None
                  else f"{stage_name}.global_batch_size / (micro_batch_size x world size)")
    ours: dict[str, tuple[Any, str]] = {  # DeepSpeed key -> (value, recipe key it comes from)
        "train_micro_batch_size_per_gpu": (stage.micro_batch_size, f"{stage_name}.micro_batch_size"),
        "gradient_accumulation_steps": (grad_accum(stage, world_size, stage_name), accum_from),
        "train_batch_size": (global_batch(stage, world_size, stage_name),
                             f"{stage_name}.global_batch_size" if stage.global_batch_size is not None
                             else f"{stage_name}.micro_batch_size x grad_accum_steps x world size"),
        "gradient_clipping": (stage.grad_clip, f"{stage_name}.grad_clip"),
        "zero_optimization.stage": (engine.zero_stage, "engine.zero_stage"),
        "bf16.enabled": (engine.precision == "bf16", "engine.precision"),
        "fp16.enabled": (engine.precision == "fp16", "engine.precision"),
    }
    raw = dict(engine.deepspeed_config or {})
    for owned in ("optimizer", "scheduler"):
        if owned in raw:
            raise LangadaptError(f"engine.deepspeed_config.{owned}: langadapt sets the {owned} "
                                 f"({stage_name}.optimizer / {stage_name}.schedule); remove it")
    config: dict[str, Any] = {"steps_per_print": 10**9, "wall_clock_breakdown": False}
    config.update({k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()})
    for dotted, (value, source) in ours.items():
        parent, key = _slot(config, dotted)
        if key in parent and parent[key] != value:
            raise LangadaptError(f"engine.deepspeed_config.{dotted} = {parent[key]!r} contradicts "
                                 f"{source} = {value!r}; set it in one place")
        parent[key] = value
    config["zero_allow_untested_optimizer"] = True  # our torch AdamW under ZeRO
    if engine.precision == "bf16" and engine.zero_stage >= 1:
        for dotted, value in FP32_GRADIENTS.items():  # defaults: a raw value (bf16, for speed) wins
            parent, key = _slot(config, dotted)
            parent.setdefault(key, value)
    if offloads_optimizer(config):  # torch AdamW steps the CPU partitions (no C++ CPUAdam build)
        config.setdefault("zero_force_ds_cpu_optimizer", False)
    if engine.zero_stage == 3:  # export gathers the full weights on rank 0
        config["zero_optimization"].setdefault("stage3_gather_16bit_weights_on_model_save", True)
    return config


def _slot(config: dict, dotted: str) -> tuple[dict, str]:
    """The dict and key a dotted DeepSpeed key ("zero_optimization.stage") lives at, created if missing."""
    node, *path = dotted.split(".")
    return (config.setdefault(node, {}), path[0]) if path else (config, node)


def offloads_optimizer(config: dict) -> bool:
    """ZeRO-Offload: the optimizer state (and step) lives on the CPU."""
    offload = (config.get("zero_optimization") or {}).get("offload_optimizer") or {}
    return offload.get("device", "none") not in ("none", None)
