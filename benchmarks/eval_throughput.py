"""Evaluation throughput: `bits_per_byte` vs a naive unbatched per-document loop, side by side.

    python benchmarks/eval_throughput.py [--mb 1.0] [--baseline-mb 0.1] [--threads N]
    python benchmarks/eval_throughput.py --smoke   # seconds on a CPU: 1.5 kB and 0.8 kB of text, one thread (CI)

`--smoke` runs every side on a few kilobytes (on the CPU when the device is not given, also on a
GPU machine): it checks the script still runs, its speeds mean nothing. Without ../shared the
script says so and prints a JSON line of nulls.

Text: the held-out files of ../shared/corpora (all six languages, interleaved document by
document) up to `--mb` megabytes. Model: ../shared/models/tiny-en-llama (or `--model`). Both paths score the
same disjoint 512-token windows with the same BOS conditioning, so they must agree on bpb.

The naive loop (one forward pass per window, batch 1, log-softmax over [T, V]) is what a first
implementation looks like; it runs on the first `--baseline-mb` of the same text (it is the
slow side), and `bits_per_byte` is timed on that same slice for the ratio, then on the full text
for the headline tokens/s and wall time. Last line: the JSON record of benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import time
from pathlib import Path
from unittest import mock

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from langadapt.evaluation import bpb
from langadapt.evaluation.bpb import bits_per_byte, default_batch_size, model_device, rolling_windows
from langadapt.evaluation.task_data import cap_bytes

SHARED = Path(__file__).resolve().parents[2] / "shared"
LANGS = ("nb", "nn", "en", "sv", "da", "fi")


def held_out_text(max_bytes: int) -> list[str]:
    """Valid documents of every language, interleaved (so any prefix mixes languages)."""
    per_lang = []
    for lang in LANGS:
        docs = []
        for path in sorted((SHARED / "corpora").glob(f"{lang}.*.valid.jsonl.gz")):
            with gzip.open(path, "rt", encoding="utf-8") as f:
                docs += [json.loads(line)["text"] for line in f]
        per_lang.append(docs)
    interleaved = [d for group in _zip_longest(per_lang) for d in group]
    return cap_bytes(interleaved, max_bytes)


def _zip_longest(lists: list[list[str]]) -> list[list[str]]:
    return [[lst[i] for lst in lists if i < len(lst)] for i in range(max(map(len, lists)))]


@torch.inference_mode()
def naive_bits_per_byte(model, tokenizer, texts: list[str], window: int = 512) -> dict:
    """One document at a time, one window per forward pass, no batching."""
    nll, tokens = 0.0, 0
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        tokens += len(ids)
        for w in rolling_windows(0, ids, tokenizer.bos_token_id, window, window):
            device = model_device(model)
            logits = model(input_ids=torch.tensor([w.input_ids], device=device)).logits[0]
            logprobs = torch.log_softmax(logits.float(), dim=-1)[-w.n_scored :]
            targets = torch.tensor(w.labels[-w.n_scored :], device=device)
            nll -= logprobs.gather(1, targets[:, None]).sum().item()
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    return {"bits_per_byte": nll / n_bytes / math.log(2), "tokens": tokens}


def timed(fn, *args, **kwargs) -> dict:
    """Run one scorer; adds wall `seconds` and `cpu_seconds` (all threads of this process).

    On a shared machine wall time depends on the neighbours; CPU seconds do not, and on an idle
    machine with two cores the wall time is about cpu_seconds / 2.
    """
    started, cpu = time.perf_counter(), time.process_time()
    result = fn(*args, **kwargs)
    result["seconds"] = time.perf_counter() - started
    result["cpu_seconds"] = time.process_time() - cpu
    result["tokens_per_second"] = result["tokens"] / result["seconds"]
    return result


def paragraphs(texts: list[str]) -> list[str]:
    """The same text cut into paragraphs: many short documents, where per-call overhead shows."""
    return [p for t in texts for p in t.split("\n") if p.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=1.0, help="megabytes of text for the headline run")
    parser.add_argument(
        "--baseline-mb", type=float, default=0.1, help="megabytes for the side-by-side comparison"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--model", type=Path, default=SHARED / "models" / "tiny-en-llama",
                        help="HF model folder (default: ../shared/models/tiny-en-llama; e.g. the demo's "
                             "runs/tiny_norwegian_warm/export/model)")
    parser.add_argument("--batch-size", type=int, default=None, help="windows per forward (default: 1 on CPU, 8 on GPU)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="where the model runs (bfloat16 on GPUs, as evaluation.dtype auto does)")
    parser.add_argument("--random-1b", action="store_true",
                        help="time a randomly initialised ~1.1B Llama (train_throughput's gpu-1b shape, the "
                             "vocabulary of --model's tokenizer) instead of --model's weights: its bpb means nothing")
    parser.add_argument("--smoke", action="store_true",
                        help="1.5 kB (0.8 kB side by side) on one CPU thread: the script's path in seconds (CI), not a measurement")
    args = parser.parse_args()
    if args.smoke:
        args.mb, args.baseline_mb, args.device, args.threads = 0.0015, 0.0008, "cpu", 1
    if args.threads:
        torch.set_num_threads(args.threads)
    model_dir = args.model
    if not (model_dir / "config.json").is_file() or not (SHARED / "corpora").is_dir():
        print(f"eval_throughput needs ../shared/corpora (at {SHARED}) and a model folder ({model_dir}); not found")
        print(json.dumps({"benchmark": "eval_throughput", "metric": "tokens_per_second", "value": None,
                          "baseline": None, "ratio": None, "unit": "tokens/s", "skipped": "no ../shared"}))
        return
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    if args.random_1b:
        from train_throughput import PRESETS, build_model

        spec = dict(PRESETS["gpu-1b"]["configs"]["llama-1b"], vocab_size=len(tokenizer))
        model = build_model(spec)
    else:
        model = AutoModelForCausalLM.from_pretrained(model_dir)
    model = model.to(device=args.device, dtype=dtype).eval()
    print(f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters, {dtype}, {args.device}")
    full = held_out_text(int(args.mb * 1_000_000))
    part = held_out_text(int(args.baseline_mb * 1_000_000))

    batch = args.batch_size or default_batch_size(model_device(model))
    kw = {"window": 512, "stride": 512, "batch_size": batch}
    naive = timed(naive_bits_per_byte, model, tokenizer, part)
    ours_part = timed(bits_per_byte, model, tokenizer, part, **kw)
    short = paragraphs(part)
    naive_short = timed(naive_bits_per_byte, model, tokenizer, short)
    ours_short = timed(bits_per_byte, model, tokenizer, short, **kw)
    ours_full = timed(bits_per_byte, model, tokenizer, full, **kw)
    # The settings before the head split and the CPU batch default (session 2), for the record.
    with mock.patch.object(bpb, "head_splits_cleanly", return_value=False):
        before_full = timed(bits_per_byte, model, tokenizer, full, window=512, stride=512, batch_size=8)
    ratio = ours_part["tokens_per_second"] / naive["tokens_per_second"]

    print(f"torch threads: {torch.get_num_threads()}   window = stride = 512   batch {batch}")
    print(f"{'run':<44}{'docs':>6}{'tokens':>9}{'wall s':>8}{'cpu s':>8}{'tokens/s':>10}{'bpb':>9}")
    slice_ = f"{args.baseline_mb} MB"
    rows = [
        (f"naive loop, {slice_} (whole documents)", part, naive),
        (f"bits_per_byte, {slice_} (whole documents)", part, ours_part),
        (f"naive loop, {slice_} as paragraphs", short, naive_short),
        (f"bits_per_byte, {slice_} as paragraphs", short, ours_short),
        (f"bits_per_byte, {args.mb} MB (whole documents)", full, ours_full),
        ("  same, batch 8 + full logits (before)", full, before_full),
    ]
    for label, texts, r in rows:
        print(
            f"{label:<44}{len(texts):>6}{r['tokens']:>9,}{r['seconds']:>8.1f}{r['cpu_seconds']:>8.1f}"
            f"{r['tokens_per_second']:>10,.0f}{r['bits_per_byte']:>9.4f}"
        )
    same = abs(naive["bits_per_byte"] - ours_part["bits_per_byte"]) < 1e-4
    print(
        f"same bpb as the naive loop: {same}; speed-up {ratio:.2f}x on whole documents, "
        f"{ours_short['tokens_per_second'] / naive_short['tokens_per_second']:.2f}x on paragraphs; "
        f"{args.mb} MB in {ours_full['seconds']:.1f} s wall, {ours_full['cpu_seconds']:.1f} s CPU "
        f"(before: {before_full['seconds']:.1f} s wall)"
    )
    print(
        json.dumps(
            {
                "benchmark": "eval_throughput",
                "metric": "tokens_per_second",
                "value": round(ours_part["tokens_per_second"], 1),
                "baseline": round(naive["tokens_per_second"], 1),
                "ratio": round(ratio, 3),
                "unit": "tokens/s",
                "full_mb_wall_seconds": round(ours_full["seconds"], 1),
                "full_mb_cpu_seconds": round(ours_full["cpu_seconds"], 1),
                "full_mb_wall_seconds_before": round(before_full["seconds"], 1),
            }
        )
    )


if __name__ == "__main__":
    main()
