"""`langadapt plan`: what a recipe will cost before any GPU hour is spent.

`build_plan` turns a model's shape and the stages' sizes into a JSON-able dict (tokens, epochs and
effective data per source, FLOPs, GPU-hours, memory per GPU under each ZeRO stage, energy, CO2);
`render_plan` prints it as tables. Both are pure: the CLI wires the recipe to them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from langadapt.errors import LangadaptError
from langadapt.planning.flops import flops_per_token
from langadapt.planning.memory import DEEPSPEED_REDUCE_BUCKET, Checkpointing, memory_per_gpu
from langadapt.planning.models import ModelDims
from langadapt.planning.render import render_plan
from langadapt.recipe.base import Config
from langadapt.recipe.hardware import Hardware, co2_kg, energy_kwh, get_hardware, gpu_hours, grid_intensity
from langadapt.recipe.train import FSDPConfig

__all__ = ["StagePlanInput", "build_plan", "render_plan"]


class StagePlanInput(Config):
    """The size of one training stage, as the planner needs it."""

    name: str
    """Stage name shown in the plan (stage1, stage2)."""
    steps: int = Field(gt=0)
    """Optimizer steps."""
    seq_len: int = Field(gt=0)
    """Tokens per training sequence."""
    global_batch_tokens: int | None = Field(default=None, gt=0)
    """Tokens per optimizer step over all GPUs; or give global_batch (sequences)."""
    global_batch: int | None = Field(default=None, gt=0)
    """Sequences per optimizer step over all GPUs; used when global_batch_tokens is not given."""
    micro_batch: int = Field(default=1, gt=0)
    """Sequences per GPU per forward/backward pass (sets activation memory)."""
    trainable: Literal["embeddings", "all"] = "all"
    """What trains: 'embeddings' (input matrix + LM head, body frozen) or 'all'."""
    zero_stage: int = Field(default=1, ge=0, le=3)
    """The ZeRO stage the recipe uses (all four are reported; this one is marked)."""
    fsdp: FSDPConfig | None = None
    """engine.fsdp when the stage runs engine.kind: fsdp (an FSDP2 row is added and marked); None: ZeRO."""
    reduce_bucket_size: float = Field(default=DEEPSPEED_REDUCE_BUCKET, gt=0)
    """DeepSpeed's zero_optimization.reduce_bucket_size (elements): sizes its reduction buffers."""
    overlap_comm: bool | None = None
    """DeepSpeed's zero_optimization.overlap_comm (None: its default); ZeRO-2 doubles its staging bucket."""
    activation_checkpointing: bool = False
    """Recompute each layer in the backward pass instead of storing its activations."""
    flash_attention: bool = True
    """Attention kernels that never store the s x s score matrix (FlashAttention, SDPA)."""
    fused_loss: bool = False
    """Head and loss fused (engine.fused_loss): the [tokens x vocab] logits are never stored whole."""
    mixture: dict[str, Any] | None = None
    """`plan_mixture(...).to_dict()` of the data engineer: per-source tokens, epochs, D'/D."""

    @model_validator(mode="after")
    def _one_batch_size(self) -> StagePlanInput:
        if self.global_batch_tokens is None and self.global_batch is None:
            raise ValueError(f"stage {self.name}: give global_batch_tokens or global_batch")
        return self

    @property
    def batch_tokens(self) -> int:
        """Tokens per optimizer step."""
        return self.global_batch_tokens or self.global_batch * self.seq_len  # type: ignore[operator]


def _mixture_summary(
    mixture: dict[str, Any] | None, tokens: float, warnings: list[str]
) -> dict[str, Any] | None:
    """Per-source tokens, epochs and D'/D from a plan_mixture dict, checked against the stage's tokens."""
    if not mixture:
        return None
    total = float(mixture.get("total_tokens", tokens))
    if abs(total - tokens) > 0.01 * tokens:
        warnings.append(f"mixture is planned for {total:.4g} tokens but the stage trains {tokens:.4g}")
    keep = ("name", "unique_tokens", "tokens", "epochs", "effective_ratio", "share")
    sources = [{k: s[k] for k in keep if k in s} for s in mixture.get("sources", [])]
    warnings.extend(mixture.get("warnings", []))
    return {
        "effective_ratio": mixture.get("effective_ratio"),
        "effective_tokens": mixture.get("effective_tokens"),
        "sources": sources,
    }


def _memory_by_zero_stage(
    model: ModelDims, stage: StagePlanInput, hw: Hardware, num_gpus: int, checkpointing: Checkpointing
) -> dict[str, dict[str, Any]]:
    """GB per GPU under ZeRO 0-3 and FSDP2 (all five, so the table shows what each buys and the
    recommendation can choose among them)."""
    memory = {}
    layouts: list[int | Literal["fsdp"]] = [0, 1, 2, 3, "fsdp"]
    for layout in layouts:
        settings = ((stage.fsdp or FSDPConfig()).model_dump() if layout == "fsdp"
                    else {"reduce_bucket": stage.reduce_bucket_size, "overlap_comm": stage.overlap_comm})
        mem = memory_per_gpu(
            model, layout, num_gpus, stage.seq_len, stage.micro_batch, stage.trainable, checkpointing,
            stage.fused_loss, **settings,
        )
        memory[f"zero{layout}" if layout != "fsdp" else "fsdp"] = {**mem, "fits": mem["total"] <= hw.memory_gb}
    return memory


LAYOUT_SPEED = {"zero0": 1.00, "zero1": 0.955, "zero2": 0.955, "zero3": 0.62, "fsdp": 0.99}
"""Tokens/s of each layout relative to the torch engine (DDP), as langadapt runs them: one H100, a
1.1B Llama at seq 2048, each with the fast path it supports (benchmarks/README.md, train_throughput,
2026-11-23: torch 73,975 tok/s; DeepSpeed ZeRO-2 72,117 with compile + fused loss; FSDP2 73,074;
ZeRO-3 45,719, which ran without compile and the fused loss). ZeRO-3 has run both since 2026-11-25
(not yet measured on a GPU: its figure is the older, lower one until it is). ZeRO-1 was not
measured: it runs the same fast path as ZeRO-2 and is given its figure. At Mistral-7B's layer shapes
on an H200 (2026-11-28, fp32 gradient accumulation, langadapt's default since 2026-11-25) ZeRO-2 ran
0.79x the torch engine; not adopted while FSDP2 and ZeRO-3 are unmeasured at that shape: one figure
from another shape would tilt the choice between layouts measured on different footing."""
LAYOUT_TRAFFIC = {"zero0": 1.0, "zero1": 1.0, "zero2": 1.0, "zero3": 1.5, "fsdp": 1.5}
"""Gradient/parameter traffic per step relative to DDP's all-reduce (ZeRO paper, Rajbhandari et al.
2020, sec. 7: ZeRO-1/2 move as much as DDP, sharded parameters 1.5x). One GPU cannot measure it, so
it only breaks near-ties (within `NEAR_TIE`) in favour of less traffic across nodes."""
NEAR_TIE = 0.05
MEMORY_MARGIN = 0.85
"""A layout is recommended only if its planned total is within this share of the GPU's memory:
measured peaks ran 9% above the plan (benchmarks/README.md) and allocators fragment."""
LAYOUT_ENGINE_ZERO = {"zero0": 0, "zero1": 1, "zero2": 2, "zero3": 3, "fsdp": 0}
ENGINE_LAYOUTS = {"torch": ("zero0",), "deepspeed": ("zero1", "zero2", "zero3"), "fsdp": ("fsdp",)}
"""The layouts each engine.kind runs (DeepSpeed ZeRO-0 is left out: the torch engine is DDP without
DeepSpeed's overhead). A recipe has one engine.kind; the ZeRO stage can differ per stage."""


def recommend(stages: list[dict[str, Any]], memory_gb: float) -> dict[str, Any]:
    """The engine and per-stage sharding that finish the recipe soonest with memory to spare, and why.

    For each engine.kind, each stage takes its fastest layout that fits `MEMORY_MARGIN` of the GPU
    (ties: less traffic, then the recipe's own layout, then less memory); the engine whose GPU-hours (the plan's, divided by
    `LAYOUT_SPEED`) are lowest wins, near-ties going to less traffic across nodes."""
    options = []
    for engine, layouts in ENGINE_LAYOUTS.items():
        picks: dict[str, str] = {}
        for stage in stages:
            mem = stage["memory_gb"]
            fits = [k for k in layouts if mem[k]["total"] <= MEMORY_MARGIN * memory_gb]
            if not fits:
                break
            picks[stage["name"]] = max(fits, key=lambda k, now=stage["memory_layout"], mem=mem: (
                LAYOUT_SPEED[k], -LAYOUT_TRAFFIC[k], k == now, -mem[k]["total"]))
        else:
            hours = sum(stage["gpu_hours"] / LAYOUT_SPEED[picks[stage["name"]]] for stage in stages)
            traffic = max(LAYOUT_TRAFFIC[k] for k in picks.values())
            options.append((engine, picks, hours, traffic))
    if not options:
        return {"engine": None, "reason": f"no engine fits every stage in {MEMORY_MARGIN:.0%} of {memory_gb:g} GB per "
                                          "GPU: more GPUs, a smaller micro batch or activation checkpointing"}
    fastest = min(hours for _, _, hours, _ in options)
    engine, picks, hours, _ = min((o for o in options if o[2] <= fastest * (1 + NEAR_TIE)), key=lambda o: (o[3], o[2]))
    current = sum(stage["gpu_hours"] / LAYOUT_SPEED[stage["memory_layout"]] for stage in stages)
    settings = [f"engine.kind={engine}"] + [f"{name}.zero_stage={LAYOUT_ENGINE_ZERO[k]}" for name, k in picks.items()
                                            if engine == "deepspeed"]
    rejected = ", ".join(f"{e} {h / hours:.2f}x the GPU-hours" + (" but more traffic across nodes" if h < hours else "")
                         for e, _, h, _ in options if e != engine)
    reason = (f"the fastest layouts that fit {MEMORY_MARGIN:.0%} of {memory_gb:g} GB per GPU, at the speeds measured "
              f"for each (planning.plan.LAYOUT_SPEED); other engines: {rejected or 'none fit'}")
    return {"engine": engine, "layouts": picks, "set": settings, "gpu_hours": hours,
            "speedup_vs_recipe": current / hours, "reason": reason}


def _stage_plan(
    model: ModelDims, stage: StagePlanInput, hw: Hardware, mfu: float, num_gpus: int, pue: float, grid: float
) -> dict[str, Any]:
    """Everything the plan says about one stage."""
    warnings: list[str] = []
    tokens = float(stage.steps) * stage.batch_tokens
    per_gpu_seqs = stage.batch_tokens / stage.seq_len / num_gpus
    grad_accum = per_gpu_seqs / stage.micro_batch
    if grad_accum < 1 or abs(grad_accum - round(grad_accum)) > 1e-9:
        warnings.append(
            f"global batch of {stage.batch_tokens / stage.seq_len:g} sequences does not split into "
            f"{num_gpus} GPUs x micro batch {stage.micro_batch} x whole accumulation steps"
        )
    fpt = flops_per_token(model, stage.seq_len, stage.trainable)
    flops = fpt * tokens
    hours = gpu_hours(flops, mfu, hw.peak_flops)
    kwh = energy_kwh(hours, hw.watts, pue)
    ckpt = "full" if stage.activation_checkpointing else ("flash" if stage.flash_attention else "none")
    memory = _memory_by_zero_stage(model, stage, hw, num_gpus, ckpt)
    layout = "fsdp" if stage.fsdp else f"zero{stage.zero_stage}"
    chosen = memory[layout]
    if not chosen["fits"]:
        warnings.append(
            f"{'FSDP2' if stage.fsdp else f'ZeRO-{stage.zero_stage}'} needs {chosen['total']:.1f} GB per GPU, "
            f"more than the {hw.memory_gb:g} GB of a {hw.name}"
        )
    tokens_per_second = mfu * hw.peak_flops / fpt
    return {
        "name": stage.name,
        "trainable": stage.trainable,
        "steps": stage.steps,
        "seq_len": stage.seq_len,
        "global_batch_tokens": stage.batch_tokens,
        "micro_batch": stage.micro_batch,
        "grad_accum_steps": grad_accum,
        "tokens": tokens,
        "mixture": _mixture_summary(stage.mixture, tokens, warnings),
        "flops_per_token": fpt,
        "flops": flops,
        "gpu_hours": hours,
        "wall_hours": hours / num_gpus,
        "tokens_per_second_per_gpu": tokens_per_second,
        "zero_stage": stage.zero_stage,
        "memory_layout": layout,
        "activation_checkpointing": ckpt,
        "memory_gb": memory,
        "energy_kwh": kwh,
        "co2_kg": co2_kg(kwh, grid),
        "warnings": warnings,
    }


def build_plan(
    model: ModelDims,
    stages: list[StagePlanInput],
    hardware: str = "h100",
    mfu: float = 0.4,
    num_gpus: int = 8,
    *,
    peak_tflops: float | None = None,
    watts: float | None = None,
    memory_gb: float | None = None,
    pue: float = 1.2,
    grid: str | float = "world",
) -> dict[str, Any]:
    """The plan of all stages as a JSON-able dict: `model`, `hardware`, `stages`, `total`.

    Each stage has tokens, steps, grad_accum_steps, `mixture` (per-source tokens, epochs and D'/D),
    flops_per_token, flops, gpu_hours, wall_hours, tokens_per_second_per_gpu, `memory_gb` for
    zero0-zero3 and fsdp when it runs (weights, gradients, optimizer, activations, total, fits), the
    `memory_layout` among them that the stage uses, energy_kwh, co2_kg and
    warnings. `grid` is gCO2e/kWh or a preset of `hardware.GRIDS`; `pue` multiplies device power.
    """
    if num_gpus < 1:
        raise LangadaptError(f"num_gpus {num_gpus}: must be at least 1")
    hw = get_hardware(hardware, peak_tflops, watts, memory_gb)
    intensity = grid_intensity(grid)
    plans = [_stage_plan(model, s, hw, mfu, num_gpus, pue, intensity) for s in stages]
    recommendation = recommend(plans, hw.memory_gb)
    sums = {
        k: sum(p[k] for p in plans)
        for k in ("tokens", "flops", "gpu_hours", "wall_hours", "energy_kwh", "co2_kg")
    }
    return {
        "model": {
            "name": model.name,
            "params": model.num_params(),
            "embedding_params": model.embedding_params(),
            "body_params": model.body_params(),
            "hidden": model.hidden,
            "layers": model.layers,
            "heads": model.heads,
            "kv_heads": model.kv_heads,
            "ffn": model.ffn,
            "vocab": model.vocab,
            "tied": model.tied,
        },
        "hardware": {
            "name": hw.name,
            "peak_tflops": hw.peak_flops / 1e12,
            "watts": hw.watts,
            "memory_gb": hw.memory_gb,
            "num_gpus": num_gpus,
            "mfu": mfu,
            "pue": pue,
            "grid_g_per_kwh": intensity,
        },
        "stages": plans,
        "total": sums,
        "recommendation": recommendation,
    }


def plan_joules_per_step(plan: dict) -> dict[str, float]:
    """`langadapt plan`'s device energy per optimizer step of each stage, all devices, without PUE.

    The plan's GPU-hours at its assumed MFU times the board power (TDP): an upper bound, and the
    number a measured `joules_per_step x world size` is compared with.
    """
    watts = plan["hardware"]["watts"]
    return {s["name"]: s["gpu_hours"] * 3600.0 * watts / s["steps"] for s in plan["stages"]}
