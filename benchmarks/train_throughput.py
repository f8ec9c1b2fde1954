"""Training throughput: our stage-2 loop vs Hugging Face `Trainer`, and stage-1 vs stage-2 cost.

Side by side in one process, same model weights, batch, sequence length, threads, optimizer
(torch AdamW, fused on GPUs), schedule and clipping. Both sides are timed the same way: wall time
between the ends of consecutive optimizer steps (data, forward, backward, clip, step, logging
all included) after warm-up. Rounds alternate ours / HF / ours stage 1 so that a busy phase of
a shared machine hits every side; each side is credited with its median step (the fastest step
is printed too, but it rewards whichever side ran during a quiet moment).

On a machine shared with other jobs, wall time per step swings several-fold from one step to
the next; `--clock cpu --threads 1` times each step in process CPU seconds on one thread
instead, which only counts the work done (tokens per CPU-second; equal to tokens/s on a
dedicated core).

Configs (CPU preset): `tiny-en-llama` (hidden 256, 6 layers, vocab 8192: the embeddings and head
are half the parameters) and `body-dominated` (hidden 512, 4 layers, vocab 1024), where the
frozen-body stage-1 step should cost about 2/3 of a stage-2 step (4N vs 6N FLOPs per token).

    python benchmarks/train_throughput.py                   # CPU, both configs
    python benchmarks/train_throughput.py --preset gpu-1b   # ~1.1B Llama, bf16 + SDPA, reports MFU
    python benchmarks/train_throughput.py --preset gpu-1b --levers --deepspeed 2 3 --profile
    python benchmarks/train_throughput.py --preset gpu-1b --deepspeed 3 --fsdp   # the three engines
    python benchmarks/train_throughput.py --preset gpu-7b-shape --deepspeed 1 2 3 --fsdp --engine-stages stage1 stage2 --rounds 1
    python benchmarks/train_throughput.py --smoke   # seconds on a CPU: a 2-layer model, one round (CI)

`--smoke` runs the CPU path (ours stage 2, HF Trainer, ours stage 1, the plan's prediction) on a
tiny model (preset `smoke`) for one round: it checks the script still runs, not the speed. The
GPU presets and the DeepSpeed/FSDP sides (benchmarks/gpu_engines.sh) need a lent GPU; the test
of the smoke mode checks that the flags gpu_engines.sh passes still parse.

On a GPU, "ours" runs with the engine defaults a recipe gets there (engine.compile and
engine.fused_loss auto: per-block compile + liger's fused head/loss) at the preset's micro-batch,
and HF Trainer in its default configuration (eager, full logits) at the largest micro-batch that
fits, accumulating to the same global batch. `--levers` adds ours with each lever off,
`--deepspeed` our loop under DeepSpeed ZeRO-N on the same GPU, `--fsdp` under FSDP2
(engine.kind: fsdp, bf16 mixed precision policy; one rank, so its all-gathers are local copies:
what it measures is FSDP's own overhead beside the torch engine and ZeRO-3), `--profile` the top CUDA kernels
of a few stage-2 steps, and the plan's predicted memory and tokens/s are printed beside the
measured ones.

Prints a table, then as its LAST line the JSON contract of benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]  # tests/: the tiny Llama and the stream (helpers.synthetic)

from helpers.synthetic import SyntheticStream, tiny_llama

from langadapt.recipe.train import (
    CheckpointConfig,
    EngineConfig,
    OptimizerConfig,
    ScheduleConfig,
    TrainStageConfig,
)
from langadapt.runtime.distributed import destroy
from langadapt.train.flops import flops_per_token, peak_flops
from langadapt.train.job import TrainingJob
from langadapt.train.loop import fit
from langadapt.train.monitoring.energy import energy_counter
from langadapt.train.policy import select_trainable

TINY_EN_LLAMA = {"vocab_size": 8192, "hidden": 256, "layers": 6, "intermediate_size": 704,
                 "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 32}
BODY_DOMINATED = {"vocab_size": 1024, "hidden": 512, "layers": 4, "intermediate_size": 1408,
                  "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 32}
"""92% of the parameters in the body, and wide enough (512) that matmuls, not the element-wise
ops (norms, RoPE, SiLU, softmax) that both stages pay in full, dominate a step: like a 7B model."""
PRESETS = {
    "smoke": {  # --smoke: the CPU path in seconds (CI), not a measurement
        "configs": {"smoke": {"vocab_size": 256, "hidden": 64, "layers": 2, "intermediate_size": 128,
                              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16}},
        "micro": 2, "accum": 1, "seq": 32, "precision": "fp32", "warmup": 1, "measure": 2,
    },
    "cpu": {
        "configs": {"tiny-en-llama": TINY_EN_LLAMA, "body-dominated": BODY_DOMINATED},
        "micro": 8, "accum": 1, "seq": 256, "precision": "fp32", "warmup": 2, "measure": 4,
    },
    "gpu-1b": {  # Llama-3.2-1B-like body, NorMistral-sized untied vocabulary: ~1.1B parameters
        "configs": {"llama-1b": {"vocab_size": 32768, "hidden": 2048, "layers": 16, "intermediate_size": 8192,
                                 "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64}},
        "micro": 16, "accum": 1, "seq": 2048, "precision": "bf16", "warmup": 5, "measure": 15,
        "hf_micro": 8,  # eager HF Trainer with full logits runs out of memory at 16 x 2048 on 80 GB
    },
    # Mistral-7B's layer shapes at its sequence length (hidden 4096, MLP 14,336, 32 heads / 8 KV heads of
    # 128, vocabulary 32,768 as the headline recipe's tokenizer, seq 4096) with 10 of its 32 layers:
    # 2.45B parameters, 39 GB of fp32 weights + AdamW state, what fits one 80 GB GPU beside the
    # activations. Per-layer efficiency is the 7B's; MFU uses this model's own FLOPs formula.
    "gpu-7b-shape": {
        "configs": {"mistral-7b-shape": {"vocab_size": 32768, "hidden": 4096, "layers": 10, "intermediate_size": 14336,
                                         "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128}},
        "micro": 2, "accum": 1, "seq": 4096, "precision": "bf16", "warmup": 5, "measure": 10,
        "hf_micro": 1,
    },
}


def build_model(spec: dict) -> torch.nn.Module:
    spec = dict(spec)
    return tiny_llama(spec.pop("vocab_size"), spec.pop("hidden"), spec.pop("layers"), seed=0, **spec)


def stage_config(preset: dict, steps: int) -> TrainStageConfig:
    return TrainStageConfig(
        steps=steps, micro_batch_size=preset["micro"], grad_accum_steps=preset["accum"], seq_len=preset["seq"],
        log_every=1, optimizer=OptimizerConfig(lr=1e-4, weight_decay=0.1),
        schedule=ScheduleConfig(kind="cosine", warmup_steps=2), checkpoint=CheckpointConfig(every_steps=None),
    )


CLOCK = time.perf_counter
"""Wall clock; `--clock cpu` switches to process CPU time (see the module docstring)."""


ENERGY = energy_counter(torch.device("cuda")) if torch.cuda.is_available() else None
"""The GPU's cumulative energy counter (NVML / amdsmi), read at every stamp: joules per step."""


class TimedStream(SyntheticStream):
    """Stamps the clock when the loop asks for each step's batch: step k lasts from call k to k+1."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.stamps: list[float] = []
        self.joules: list[float] = []

    def next_batch(self, global_batch_size: int, rank: int = 0, world_size: int = 1):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.stamps.append(CLOCK())
        if ENERGY is not None:
            self.joules.append(ENERGY.joules())
        return super().next_batch(global_batch_size, rank, world_size)


PEAK_MEMORY: dict[str, float] = {}
"""GiB of device memory at the peak of each side's last run (torch.cuda.max_memory_allocated)."""
JOULES_PER_STEP: dict[str, float] = {}
"""Median measured device energy per optimizer step of each of our sides (where a counter exists)."""


def ours(spec: dict, preset: dict, stage_name: str, engine: EngineConfig, label: str) -> list[float]:
    """Seconds per optimizer step of `fit` (data, forward, backward, step, metrics, logging)."""
    steps = preset["warmup"] + preset["measure"] + 1
    engine = engine.model_copy(update={"precision": preset["precision"]})
    config = stage_config(preset, steps)
    stream = TimedStream(spec["vocab_size"], preset["seq"])
    with tempfile.TemporaryDirectory() as tmp:
        job = TrainingJob.resolve(config, engine, Path(tmp), seed=0, stage_name=stage_name)
        if not (job.engine.fused_loss and job.engine.compile) and "hf_micro" in preset:
            # Without both levers the activations do not fit at the preset's micro batch (measured on
            # an 80 GB H100): the micro batch HF Trainer fits, accumulated to the same global batch.
            config = config.model_copy(update={"micro_batch_size": preset["hf_micro"],
                                               "grad_accum_steps": preset["micro"] // preset["hf_micro"]})
            job = TrainingJob.resolve(config, engine, Path(tmp), seed=0, stage_name=stage_name)
        reset_peak()
        fit(build_model(spec), stream, job)
    if engine.kind == "fsdp":  # its one-rank group would make the next config's HF Trainer look distributed
        destroy()
    record_peak(label)
    if stream.joules:
        JOULES_PER_STEP[label] = statistics.median([b - a for a, b in zip(stream.joules, stream.joules[1:])][preset["warmup"]:])
    gaps = [b - a for a, b in zip(stream.stamps, stream.stamps[1:])]
    return gaps[preset["warmup"]:]


LEFTOVER_BYTES = 0
"""Device memory still allocated when a side starts (what earlier sides left behind)."""


def reset_peak() -> None:
    global LEFTOVER_BYTES
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
        LEFTOVER_BYTES = torch.cuda.memory_allocated()


def record_peak(label: str) -> None:
    """The side's own peak: the process's peak minus what earlier sides left allocated. On the H100
    (2026-11-23) a DeepSpeed ZeRO-3 side left 17.4 GiB behind, which the next side's raw peak counted."""
    if torch.cuda.is_available():
        PEAK_MEMORY[label] = (torch.cuda.max_memory_allocated() - LEFTOVER_BYTES) / 2**30
        if LEFTOVER_BYTES > 2**30:
            print(f"[{label}] {LEFTOVER_BYTES / 2**30:.1f} GiB were still allocated by earlier sides "
                  "(not counted in its peak)", flush=True)


def hf_trainer(spec: dict, preset: dict) -> list[float]:
    """Seconds per optimizer step of transformers.Trainer on the same model and data."""
    from transformers import Trainer, TrainerCallback, TrainingArguments

    class StepTimes(TrainerCallback):
        def __init__(self) -> None:
            self.ends: list[float] = []

        def on_step_end(self, args, state, control, **kwargs):
            if torch.cuda.is_available():
                torch.cuda.synchronize()  # our loop syncs on the loss every step too
            self.ends.append(CLOCK())

    class Rows(torch.utils.data.Dataset):
        def __init__(self, stream: SyntheticStream, count: int) -> None:
            self.stream, self.count = stream, count

        def __len__(self) -> int:
            return self.count

        def __getitem__(self, i: int) -> dict:
            ids = torch.from_numpy(self.stream.row(i)[:-1].copy())
            return {"input_ids": ids, "labels": ids}  # HF shifts labels itself

    steps = preset["warmup"] + preset["measure"]
    gpu = torch.cuda.is_available()
    timer = StepTimes()
    micro = preset.get("hf_micro", preset["micro"])
    accum = preset["accum"] * preset["micro"] // micro  # the same global batch as ours
    reset_peak()
    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(
            output_dir=tmp, per_device_train_batch_size=micro, gradient_accumulation_steps=accum,
            max_steps=steps, learning_rate=1e-4, weight_decay=0.1, adam_beta2=0.95, lr_scheduler_type="cosine",
            warmup_steps=2, max_grad_norm=1.0, logging_steps=1, save_strategy="no", report_to="none",
            disable_tqdm=True, use_cpu=not gpu, bf16=preset["precision"] == "bf16",
            optim="adamw_torch_fused" if gpu else "adamw_torch", dataloader_num_workers=0, torch_compile=False,
        )
        data = Rows(SyntheticStream(spec["vocab_size"], preset["seq"]), steps * preset["micro"] * preset["accum"])
        Trainer(model=build_model(spec), args=args, train_dataset=data, callbacks=[timer]).train()
    record_peak("HF Trainer")
    gaps = [b - a for a, b in zip(timer.ends, timer.ends[1:])]
    return gaps[preset["warmup"] - 1:]


def release() -> None:
    """Free the previous side's model and optimizer before the next one is built (GPU memory)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def build_parser() -> argparse.ArgumentParser:
    """The command line (benchmarks/gpu_engines.sh passes its flags; a test checks they parse)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="gpu-1b" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--smoke", action="store_true",
                        help="preset smoke, one round, CPU: the script's path in seconds (CI), not a measurement")
    parser.add_argument("--rounds", type=int, default=3, help="alternating ours/HF rounds per config")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--levers", action="store_true", help="also ours with each fast-path lever off")
    parser.add_argument("--deepspeed", type=int, nargs="*", default=[], metavar="ZERO",
                        help="also our loop under DeepSpeed at these ZeRO stages (one process)")
    parser.add_argument("--deepspeed-bf16-gradients", action="store_true",
                        help="also each --deepspeed side with DeepSpeed's bf16 gradient accumulation and reduction "
                             "(what langadapt's fp32 default costs)")
    parser.add_argument("--fsdp", action="store_true", help="also our loop under FSDP2 (engine.kind: fsdp, one process)")
    parser.add_argument("--engine-stages", nargs="+", choices=["stage1", "stage2"], default=["stage2"],
                        help="the stages the --deepspeed/--fsdp sides run (stage1: frozen body)")
    parser.add_argument("--profile", choices=["stage1", "stage2"], help="top CUDA kernels of ours at this stage")
    parser.add_argument("--skip-core", action="store_true",
                        help="no HF Trainer and no stage 1: ours at stage 2 (the reference) and the extra sides only")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="cpu: process CPU seconds per step (stable on a shared machine; use with --threads 1)")
    return parser


def main() -> None:
    parser = build_parser()
    args = parser.parse_args()
    if args.smoke:
        args.preset, args.rounds = "smoke", 1
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    preset = PRESETS[args.preset]
    if args.deepspeed_bf16_gradients and preset["precision"] != "bf16":
        parser.error(f"--deepspeed-bf16-gradients: preset {args.preset} trains in {preset['precision']}, not bf16")
    tokens = preset["micro"] * preset["accum"] * preset["seq"]
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    peak = peak_flops(device, preset["precision"])
    defaults = EngineConfig()  # what a recipe gets: compile and fused_loss auto
    results = {}
    for name, spec in preset["configs"].items():
        times: dict[str, list[float]] = {"ours stage2": [], "HF Trainer": [], "ours stage1": []}
        for _ in range(args.rounds):
            times["ours stage2"] += progress("ours stage2", ours(spec, preset, "stage2", defaults, "ours stage2"), tokens)
            if args.skip_core:
                continue
            times["HF Trainer"] += progress("HF Trainer", hf_trainer(spec, preset), tokens)
            times["ours stage1"] += progress("ours stage1", ours(spec, preset, "stage1", defaults, "ours stage1"), tokens)
        sides = extra_sides(args)
        for label, (engine, stage) in sides.items():
            times[label] = progress(label, ours(spec, preset, stage, engine, label), tokens)
        model = build_model(spec)
        fpt2 = flops_per_token(model, select_trainable(model, ["all"]), preset["seq"])
        fpt1 = flops_per_token(model, select_trainable(model, TrainStageConfig().trainable_patterns("stage1")),
                               preset["seq"])
        times = {k: v for k, v in times.items() if v}
        results[name] = {k: tokens / statistics.median(v) for k, v in times.items()}
        results[name]["best"] = {k: tokens / min(v) for k, v in times.items()}
        stage1_sides = {"ours stage1", *(k for k, (_, stage) in sides.items() if stage == "stage1")}
        results[name]["mfu"] = {k: None if peak is None else v * (fpt1 if k in stage1_sides else fpt2) / peak
                                for k, v in results[name].items() if k != "best"}  # each of its own FLOPs
        results[name]["params_M"] = sum(p.numel() for p in model.parameters()) / 1e6
        results[name]["flops_ratio"] = fpt1 / fpt2  # what stage 1's time per token can reach against stage 2's
        layouts = {"ours stage2": (0, "stage2"), "ours stage1": (0, "stage1"),
                   **{label: ("fsdp" if engine.kind == "fsdp" else engine.zero_stage, stage)
                      for label, (engine, stage) in sides.items()
                      if engine.kind != "torch" and not engine.deepspeed_config}}  # the plan is of the defaults
        results[name]["plan"] = plan_prediction(model.config.to_dict(), preset, fpt2, peak, layouts)
        del model
        if args.profile:
            profile_stage(spec, preset, defaults, args.profile)
    report(args, preset, results)


def progress(label: str, gaps: list[float], tokens: int) -> list[float]:
    """Print one side's result as soon as it is measured (a long GPU run may be cut off)."""
    release()
    memory = f", peak {PEAK_MEMORY[label]:.1f} GiB" if label in PEAK_MEMORY else ""
    print(f"[{label}] median {tokens / statistics.median(gaps):,.0f} tok/s over {len(gaps)} steps{memory}", flush=True)
    return gaps


def extra_sides(args: argparse.Namespace) -> dict[str, tuple[EngineConfig, str]]:
    """The optional sides, each ours with one engine setting changed: label -> (engine, stage).

    Levers at stage 2; each engine at every stage of `--engine-stages` (stage 1: the frozen body,
    labelled "... stage1")."""
    sides = {}
    if args.levers:
        sides["ours, no compile, no fused loss"] = (EngineConfig(compile=False, fused_loss=False), "stage2")
        sides["ours, compile only"] = (EngineConfig(fused_loss=False), "stage2")
        sides["ours, fused loss only"] = (EngineConfig(compile=False), "stage2")
    engines = {f"DeepSpeed ZeRO-{zero}": EngineConfig(kind="deepspeed", zero_stage=zero) for zero in args.deepspeed}
    if args.fsdp:  # last: its one-rank process group is then DeepSpeed's, not the other way round
        engines["FSDP2"] = EngineConfig(kind="fsdp")
    for label, engine in engines.items():
        for stage in args.engine_stages:
            sides[label if stage == "stage2" else f"{label} {stage}"] = (engine, stage)
    if args.deepspeed_bf16_gradients:  # at stage 2, where every parameter has a gradient
        from langadapt.train.engines.deepspeed_json import BF16_GRADIENTS

        sides.update({f"DeepSpeed ZeRO-{zero}, bf16 gradients": (EngineConfig(
            kind="deepspeed", zero_stage=zero, deepspeed_config=BF16_GRADIENTS), "stage2") for zero in args.deepspeed})
    return sides


def plan_prediction(config: dict, preset: dict, fpt: float, peak: float | None,
                    layouts: dict[str, tuple[int | str, str]]) -> dict:
    """What `langadapt plan` predicts for this model and batch: memory of each side (`layouts`: label ->
    (ZeRO stage or "fsdp", stage name)), and tokens/s at its MFU."""
    from langadapt.planning.memory import memory_per_gpu
    from langadapt.planning.models import dims_from_config
    from langadapt.recipe import ClusterConfig
    from langadapt.recipe.hardware import get_hardware

    fused = torch.cuda.is_available()  # engine.fused_loss auto
    dims = dims_from_config(config)
    memory = {label: memory_per_gpu(dims, layout, 1, preset["seq"], preset["micro"], fused_loss=fused,
                                    trainable="all" if stage == "stage2" else "embeddings")["total"] * 1e9 / 2**30
              for label, (layout, stage) in layouts.items()}
    mfu = ClusterConfig().mfu  # the recipe default `plan` assumes
    tokens_per_second = None if peak is None else mfu * peak / fpt
    watts = get_hardware(ClusterConfig().hardware).watts if torch.cuda.is_available() else None
    tokens_per_step = preset["micro"] * preset["accum"] * preset["seq"]
    return {"memory_gib": memory, "mfu": mfu, "tokens_per_second": tokens_per_second,
            # as `langadapt plan`: board power (TDP) for the predicted step time, an upper bound
            "joules_per_step": None if tokens_per_second is None or watts is None else watts * tokens_per_step / tokens_per_second}


class ProfiledStream(TimedStream):
    """Steps the profiler's schedule once per optimizer step (the loop asks for one batch per step)."""

    profiler: torch.profiler.profile | None = None

    def next_batch(self, global_batch_size: int, rank: int = 0, world_size: int = 1):
        if self.profiler is not None:
            self.profiler.step()
        return super().next_batch(global_batch_size, rank, world_size)


def profile_stage(spec: dict, preset: dict, engine: EngineConfig, stage_name: str) -> None:
    """Print the top CUDA kernels of three steps after warm-up (where the time goes)."""
    from torch.profiler import ProfilerActivity, profile, schedule

    steps = preset["warmup"] + 4
    stream = ProfiledStream(spec["vocab_size"], preset["seq"])
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities, schedule=schedule(wait=preset["warmup"], warmup=0, active=3)) as prof:
        stream.profiler = prof
        with tempfile.TemporaryDirectory() as tmp:
            fit(build_model(spec), stream,
                TrainingJob.resolve(stage_config(preset, steps),
                                    engine.model_copy(update={"precision": preset["precision"]}),
                                    Path(tmp), seed=0, stage_name=stage_name))
    key = "self_cuda_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
    print(f"\nprofile: ours {stage_name}, 3 steps after {preset['warmup']} warm-up steps, top kernels by {key}")
    print(prof.key_averages().table(sort_by=key, row_limit=18, max_name_column_width=70))
    release()


def report(args: argparse.Namespace, preset: dict, results: dict) -> None:
    print(f"\ntrain_throughput: preset {args.preset}, batch {preset['micro']}x{preset['accum']} x seq {preset['seq']} "
          f"(HF Trainer micro {preset.get('hf_micro', preset['micro'])}), {preset['precision']}, {args.threads} threads, "
          f"{args.clock} clock, median of {args.rounds}x{preset['measure']} steps per side (extra sides: 1x)")
    for name, r in results.items():
        print(f"\n{name} ({r['params_M']:.1f}M parameters)")
        print(f"{'side':<34}{'tok/s':>10}{'vs HF':>8}{'MFU':>8}{'peak GiB':>10}{'J/step':>8}{'fastest step tok/s':>20}")
        for side, value in r.items():
            if side in ("best", "mfu", "params_M", "plan", "flops_ratio"):
                continue
            mfu = "n/a" if r["mfu"][side] is None else f"{100 * r['mfu'][side]:.1f}%"
            memory = f"{PEAK_MEMORY[side]:.1f}" if side in PEAK_MEMORY else "n/a"
            vs_hf = f"{value / r['HF Trainer']:.2f}" if "HF Trainer" in r else "n/a"
            joules = f"{JOULES_PER_STEP[side]:.0f}" if side in JOULES_PER_STEP else "n/a"
            print(f"{side:<34}{value:>10,.0f}{vs_hf:>8}{mfu:>8}{memory:>10}{joules:>8}{r['best'][side]:>20,.0f}")
        plan = r["plan"]
        if plan["joules_per_step"] is not None and JOULES_PER_STEP:
            print(f"plan energy (TDP at MFU {plan['mfu']:.0%}): {plan['joules_per_step']:.0f} J/step -> measured/planned "
                  + ", ".join(f"{side} {j / plan['joules_per_step']:.2f}" for side, j in JOULES_PER_STEP.items()))
        if "ours stage1" in r:
            print(f"stage-1 / stage-2 time per token: {r['ours stage2'] / r['ours stage1']:.3f} "
                  f"(FLOPs ratio {r['flops_ratio']:.3f})")
        if plan["tokens_per_second"] is not None:
            print(f"plan (MFU {plan['mfu']:.0%}): {plan['tokens_per_second']:,.0f} tok/s "
                  f"-> measured/planned tok/s {r['ours stage2'] / plan['tokens_per_second']:.2f}")
        measured = {side: gib for side, gib in PEAK_MEMORY.items() if side in plan["memory_gib"]}
        if measured:  # the goal: within 10% (issue 22)
            print("plan memory -> measured/planned: " + ", ".join(
                f"{side} {plan['memory_gib'][side]:.1f} GiB {gib / plan['memory_gib'][side]:.2f}" for side, gib in measured.items()))
    main_name = next(iter(results))
    r = results[main_name]
    if args.skip_core:
        print(json.dumps({"benchmark": "train_throughput", "metric": "tokens_per_second", "value": round(r["ours stage2"], 1),
                          "baseline": None, "ratio": None, "unit": "tokens/s", "config": main_name,
                          "sides": {k: round(v, 1) for k, v in r.items() if isinstance(v, float) and k not in ("params_M", "flops_ratio")},
                          "peak_memory_gib": {k: round(v, 2) for k, v in PEAK_MEMORY.items()},
                          "planned_memory_gib": {k: round(v, 2) for k, v in r["plan"]["memory_gib"].items()},
                          "joules_per_step": {k: round(v, 1) for k, v in JOULES_PER_STEP.items()}}))
        return
    print(json.dumps({
        "benchmark": "train_throughput", "metric": "tokens_per_second", "value": round(r["ours stage2"], 1),
        "baseline": round(r["HF Trainer"], 1), "ratio": round(r["ours stage2"] / r["HF Trainer"], 3),
        "unit": "tokens/s", "config": main_name,
        "stage1_over_stage2_time": {name: round(x["ours stage2"] / x["ours stage1"], 3) for name, x in results.items()},
        "stage1_over_stage2_flops": {name: round(x["flops_ratio"], 3) for name, x in results.items()},
        "mfu": None if r["mfu"]["ours stage2"] is None else round(r["mfu"]["ours stage2"], 4),
        "sides": {k: round(v, 1) for k, v in r.items() if isinstance(v, float) and k not in ("params_M", "flops_ratio")},
        "peak_memory_gib": {k: round(v, 2) for k, v in PEAK_MEMORY.items()},
        "planned_memory_gib": {k: round(v, 2) for k, v in r["plan"]["memory_gib"].items()},
        "joules_per_step": {k: round(v, 1) for k, v in JOULES_PER_STEP.items()},
    }))


if __name__ == "__main__":
    main()
