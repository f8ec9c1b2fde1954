"""What document masking costs: training tokens/s with and without `data.document_masking`.

Side by side in one process: the same demo-sized model (tiny-en-llama's shape: hidden 256, 6
layers, vocab 8192), the same packed batches (documents of geometric length around `--doc-len`
tokens, EOS-terminated, as the shard writer packs them), the torch engine's full step (forward,
backward, clip, AdamW). Steps alternate masked / unmasked so that a busy phase of a shared
machine hits both sides; each side is credited with its median step.

Masking changes only attention: SDPA without masking runs its causal kernel, with masking it gets
the block-diagonal [B, 1, L, L] boolean mask transformers builds from the position ids (eager
gets the same mask as additive floats). Time is process CPU time on one thread by default
(`--clock wall` for wall time): on a machine shared with other jobs wall time swings several-fold.

    python benchmarks/document_masking.py                       # CPU, sdpa and eager, seq 128 and 512
    python benchmarks/document_masking.py --attention sdpa --seq-len 2048 --clock wall   # e.g. on a GPU
    python benchmarks/document_masking.py --smoke   # seconds: a 2-layer model, sdpa and eager, seq 64, 2 steps (CI)

Prints a table, then as its LAST line the JSON contract of benchmarks/README.md (SDPA at the
longest sequence: masked tokens/s, unmasked as the baseline).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the tiny Llama (helpers.synthetic)

from helpers.synthetic import tiny_llama

from langadapt.data.stream import document_positions
from langadapt.recipe.train import EngineConfig, TrainStageConfig
from langadapt.runtime.placement import DistInfo
from langadapt.train.engines import build_engine
from langadapt.train.job import TrainingJob
from langadapt.train.policy import select_trainable

EOS, VOCAB = 1, 8192
DEMO_SHAPE = {"hidden": 256, "layers": 6, "num_attention_heads": 8, "num_key_value_heads": 4,
              "intermediate_size": 704}
SMOKE_SHAPE = {"hidden": 64, "layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128}


def packed_rows(rows: int, seq_len: int, doc_len: float, seed: int) -> torch.Tensor:
    """[rows, seq_len + 1] tokens where documents of geometric length (mean `doc_len`) end in EOS."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(2, VOCAB, (rows, seq_len + 1), generator=generator)
    ends = torch.rand(rows, seq_len + 1, generator=generator) < 1.0 / doc_len
    return torch.where(ends, EOS, tokens)


def measure(attention: str, seq_len: int, micro_batch: int, steps: int, doc_len: float, clock,
            shape: dict[str, int] = DEMO_SHAPE) -> dict[str, float]:
    """Median seconds per training step, masked and unmasked, on identical batches."""
    stage = TrainStageConfig(micro_batch_size=micro_batch, grad_accum_steps=1, seq_len=seq_len)
    engines = {}
    for masked in (False, True):
        model = tiny_llama(VOCAB, seed=0, attn_implementation=attention, max_position_embeddings=max(2048, seq_len),
                           **shape)
        job = TrainingJob.resolve(stage, EngineConfig(), Path("unused"), seed=0, stage_name="stage2", dist=DistInfo())
        engines[masked] = build_engine(model, select_trainable(model, ["*"], "stage2.trainable"), job)
    seconds: dict[bool, list[float]] = {False: [], True: []}
    for step in range(steps + 2):  # two warm-up steps per side
        batch = packed_rows(micro_batch, seq_len, doc_len, seed=step)
        inputs, labels = batch[:, :-1], batch[:, 1:]
        for masked in ((False, True) if step % 2 else (True, False)):
            engine = engines[masked]
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            start = clock()
            engine.micro_step(inputs, labels, document_positions(inputs, EOS) if masked else None)
            engine.step(1e-4, skip=False)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            if step >= 2:
                seconds[masked].append(clock() - start)
    tokens = micro_batch * seq_len
    return {"unmasked": tokens / statistics.median(seconds[False]), "masked": tokens / statistics.median(seconds[True])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attention", nargs="+", default=["sdpa", "eager"])
    parser.add_argument("--seq-len", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--tokens-per-step", type=int, default=1024, help="micro-batch = this / seq_len")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--doc-len", type=float, default=100.0, help="mean document length in tokens")
    parser.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--smoke", action="store_true",
                        help="a 2-layer model, seq 64, 128 tokens per step, 2 steps: the script's path in seconds (CI), not a measurement")
    args = parser.parse_args()
    if args.smoke:
        args.seq_len, args.tokens_per_step, args.steps, args.doc_len = [64], 128, 2, 20.0
    torch.set_num_threads(args.threads)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    unit = "tokens per CPU-second" if args.clock == "cpu" else "tokens/s"
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU, {args.threads} thread(s)"
    model = "2-layer smoke" if args.smoke else "demo-sized"
    print(f"document masking cost: {model} Llama, {device}, documents of ~{args.doc_len:g} tokens, {unit}")
    print(f"{'attention':<10} {'seq':>5} {'batch':>5} {'unmasked':>10} {'masked':>10} {'ratio':>6}")
    results = []
    for seq_len in args.seq_len:
        for attention in args.attention:
            micro_batch = max(1, args.tokens_per_step // seq_len)
            rate = measure(attention, seq_len, micro_batch, args.steps, args.doc_len, clock,
                           SMOKE_SHAPE if args.smoke else DEMO_SHAPE)
            results.append((attention, seq_len, rate))
            print(f"{attention:<10} {seq_len:>5} {micro_batch:>5} {rate['unmasked']:>10.0f} {rate['masked']:>10.0f} "
                  f"{rate['masked'] / rate['unmasked']:>6.3f}")
    attention, seq_len, rate = next((r for r in reversed(results) if r[0] == "sdpa"), results[-1])
    print(json.dumps({"benchmark": "document_masking", "metric": f"train tokens/s, {attention}, seq {seq_len}, masked",
                      "value": round(rate["masked"], 1), "baseline": round(rate["unmasked"], 1),
                      "ratio": round(rate["masked"] / rate["unmasked"], 3), "unit": unit}))


if __name__ == "__main__":
    main()
