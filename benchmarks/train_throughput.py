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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from langadapt.train.config import (
    CheckpointConfig,
    EngineConfig,
    OptimizerConfig,
    ScheduleConfig,
    TrainStageConfig,
)
from langadapt.train.flops import flops_per_token, peak_flops
from langadapt.train.loop import fit
from langadapt.train.policy import select_trainable
from langadapt.train.synthetic import SyntheticStream, tiny_llama

TINY_EN_LLAMA = {"vocab_size": 8192, "hidden": 256, "layers": 6, "intermediate_size": 704,
                 "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 32}
BODY_DOMINATED = {"vocab_size": 1024, "hidden": 512, "layers": 4, "intermediate_size": 1408,
                  "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 32}
"""92% of the parameters in the body, and wide enough (512) that matmuls, not the element-wise
ops (norms, RoPE, SiLU, softmax) that both stages pay in full, dominate a step: like a 7B model."""
PRESETS = {
    "cpu": {
        "configs": {"tiny-en-llama": TINY_EN_LLAMA, "body-dominated": BODY_DOMINATED},
        "micro": 8, "accum": 1, "seq": 256, "precision": "fp32", "warmup": 2, "measure": 4,
    },
    "gpu-1b": {  # Llama-3.2-1B-like body, NorMistral-sized untied vocabulary: ~1.1B parameters
        "configs": {"llama-1b": {"vocab_size": 32768, "hidden": 2048, "layers": 16, "intermediate_size": 8192,
                                 "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64}},
        "micro": 8, "accum": 1, "seq": 2048, "precision": "bf16", "warmup": 5, "measure": 20,
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


class TimedStream(SyntheticStream):
    """Stamps the clock when the loop asks for each step's batch: step k lasts from call k to k+1."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.stamps: list[float] = []

    def next_batch(self, global_batch_size: int, rank: int = 0, world_size: int = 1):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.stamps.append(CLOCK())
        return super().next_batch(global_batch_size, rank, world_size)


def ours(spec: dict, preset: dict, stage_name: str, compile_: bool) -> list[float]:
    """Seconds per optimizer step of `fit` (data, forward, backward, step, metrics, logging)."""
    steps = preset["warmup"] + preset["measure"] + 1
    engine = EngineConfig(precision=preset["precision"], compile=compile_)
    stream = TimedStream(spec["vocab_size"], preset["seq"])
    with tempfile.TemporaryDirectory() as tmp:
        fit(build_model(spec), stream, stage_config(preset, steps), engine, Path(tmp), seed=0, stage_name=stage_name)
    gaps = [b - a for a, b in zip(stream.stamps, stream.stamps[1:])]
    return gaps[preset["warmup"]:]


def hf_trainer(spec: dict, preset: dict, compile_: bool) -> list[float]:
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
    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(
            output_dir=tmp, per_device_train_batch_size=preset["micro"], gradient_accumulation_steps=preset["accum"],
            max_steps=steps, learning_rate=1e-4, weight_decay=0.1, adam_beta2=0.95, lr_scheduler_type="cosine",
            warmup_steps=2, max_grad_norm=1.0, logging_steps=1, save_strategy="no", report_to="none",
            disable_tqdm=True, use_cpu=not gpu, bf16=preset["precision"] == "bf16",
            optim="adamw_torch_fused" if gpu else "adamw_torch", dataloader_num_workers=0, torch_compile=compile_,
        )
        data = Rows(SyntheticStream(spec["vocab_size"], preset["seq"]), steps * preset["micro"] * preset["accum"])
        Trainer(model=build_model(spec), args=args, train_dataset=data, callbacks=[timer]).train()
    gaps = [b - a for a, b in zip(timer.ends, timer.ends[1:])]
    return gaps[preset["warmup"] - 1:]


def release() -> None:
    """Free the previous side's model and optimizer before the next one is built (GPU memory)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="gpu-1b" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rounds", type=int, default=3, help="alternating ours/HF rounds per config")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--compile", action="store_true", help="torch.compile both sides")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="cpu: process CPU seconds per step (stable on a shared machine; use with --threads 1)")
    args = parser.parse_args()
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    preset = PRESETS[args.preset]
    tokens = preset["micro"] * preset["accum"] * preset["seq"]
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    peak = peak_flops(device, preset["precision"])
    results = {}
    for name, spec in preset["configs"].items():
        times: dict[str, list[float]] = {"ours stage2": [], "HF Trainer": [], "ours stage1": []}
        for _ in range(args.rounds):
            times["ours stage2"] += ours(spec, preset, "stage2", args.compile)
            release()
            times["HF Trainer"] += hf_trainer(spec, preset, args.compile)
            release()
            times["ours stage1"] += ours(spec, preset, "stage1", args.compile)
            release()
        model = build_model(spec)
        fpt2 = flops_per_token(model, select_trainable(model, ["all"]), preset["seq"])
        results[name] = {k: tokens / statistics.median(v) for k, v in times.items()}
        results[name]["best"] = {k: tokens / min(v) for k, v in times.items()}
        results[name]["mfu"] = None if peak is None else results[name]["ours stage2"] * fpt2 / peak
        results[name]["params_M"] = sum(p.numel() for p in model.parameters()) / 1e6
    report(args, preset, results)


def report(args: argparse.Namespace, preset: dict, results: dict) -> None:
    print(f"\ntrain_throughput: preset {args.preset}, batch {preset['micro']}x{preset['accum']} x seq {preset['seq']}, "
          f"{preset['precision']}, {args.threads} threads, {args.clock} clock, median of {args.rounds}x{preset['measure']} steps per side")
    print(f"{'config':<16}{'params':>8}{'ours tok/s':>12}{'HF tok/s':>11}{'ratio':>7}"
          f"{'stage1 tok/s':>14}{'s1/s2 time':>12}{'MFU':>7}")
    for name, r in results.items():
        mfu = "n/a" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"
        print(f"{name:<16}{r['params_M']:>7.1f}M{r['ours stage2']:>12,.0f}{r['HF Trainer']:>11,.0f}"
              f"{r['ours stage2'] / r['HF Trainer']:>7.2f}{r['ours stage1']:>14,.0f}"
              f"{r['ours stage2'] / r['ours stage1']:>12.2f}{mfu:>7}")
        m = r["best"]
        print(f"{'  (fastest step)':<24}{m['ours stage2']:>12,.0f}{m['HF Trainer']:>11,.0f}"
              f"{m['ours stage2'] / m['HF Trainer']:>7.2f}{m['ours stage1']:>14,.0f}"
              f"{m['ours stage2'] / m['ours stage1']:>12.2f}")
    main_name = next(iter(results))
    r = results[main_name]
    stage_ratio = {name: round(x["ours stage2"] / x["ours stage1"], 3) for name, x in results.items()}
    print(json.dumps({
        "benchmark": "train_throughput", "metric": "tokens_per_second", "value": round(r["ours stage2"], 1),
        "baseline": round(r["HF Trainer"], 1), "ratio": round(r["ours stage2"] / r["HF Trainer"], 3),
        "unit": "tokens/s", "config": main_name, "stage1_over_stage2_time": stage_ratio,
        "mfu": None if r["mfu"] is None else round(r["mfu"], 4),
    }))


if __name__ == "__main__":
    main()
