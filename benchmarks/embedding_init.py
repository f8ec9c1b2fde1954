"""Which embedding initialisation carries the most of an English model into Norwegian?

Adapts ../shared/models/tiny-en-llama (8.6M params, English byte-level BPE 8k, untied) to a new
8k byte-level BPE trained on the Norwegian (nb + nn) train text, once per method, and reports
Bokmål held-out bits per byte (nb.debian-handbook.valid) at step 0 and after the same short
stage 1 for every method: body frozen, only input embeddings + LM head train, same steps, data
order, seed and optimizer (AdamW b2=0.95, wd 0.1, clip 1.0, as in the NorMistral recipe; a
higher LR because the run is short and the model tiny). `random` (N(mean, cov) rows in the
same warm body) is the baseline, as DESIGN.md asks: a cold model is not a fair comparison.

    python benchmarks/embedding_init.py [--steps 100] [--methods random,mean,align,focus]

Prints a table and, last, one JSON line (value = mean's bpb after stage 1, baseline = random's).
`wechsel` is not run: it needs word vectors and a bilingual dictionary, which ../shared lacks.
Runs on one thread by default: on shared, oversubscribed cores two OpenMP threads were 4-6x
SLOWER per step here (0.76 s vs 3-5 s for 8 x 128 tokens).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from langadapt.embeddings import EmbeddingConfig, build_mapping, transfer_embeddings

METHOD_CONFIGS = {
    "random": {"method": "random"},
    "mean": {"method": "mean"},
    "align": {"method": "align"},
    "focus": {"method": "focus", "fasttext_workers": 1},
}


def read(shared: Path, name: str) -> list[str]:
    with gzip.open(shared / "corpora" / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


def new_tokenizer(
    old: PreTrainedTokenizerFast, texts: list[tuple[str, str]]
) -> tuple[PreTrainedTokenizerFast, str]:
    """The toolkit's tokenizer trainer when present (inherits tiny-en-llama's conventions), else plain BPE."""
    try:
        from langadapt.tokenizer.config import TokenizerConfig
        from langadapt.tokenizer.train import train_tokenizer
    except ImportError:
        from tokenizers import ByteLevelBPETokenizer

        bpe = ByteLevelBPETokenizer()
        bpe.train_from_iterator(
            [t for _, t in texts], vocab_size=8192, special_tokens=["<s>", "</s>", "<pad>"]
        )
        tok = PreTrainedTokenizerFast(
            tokenizer_object=bpe._tokenizer, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
        )
        return tok, "tokenizers ByteLevelBPE (inline)"
    return train_tokenizer(
        TokenizerConfig(vocab_size=8192), texts, old, seed=0
    ), "langadapt.tokenizer.train_tokenizer"


def windows(tokenizer, texts: list[str], width: int) -> list[tuple[list[int], list[int]]]:
    """Disjoint (input, target) windows; each document starts after BOS; every token scored once."""
    out = []
    for text in texts:
        seq = [tokenizer.bos_token_id] + tokenizer(text, add_special_tokens=False)["input_ids"]
        for start in range(0, len(seq) - 1, width):
            chunk = seq[start : start + width + 1]
            out.append((chunk[:-1], chunk[1:]))
    return out


@torch.inference_mode()
def bits_per_byte(model, wins: list[tuple[list[int], list[int]]], n_bytes: int, batch: int = 8) -> float:
    """-(sum log-likelihood, nats) / UTF-8 bytes / ln 2 (right-padding is never scored)."""
    model.eval()
    nll = 0.0
    for i in range(0, len(wins), batch):
        group = wins[i : i + batch]
        width = max(len(x) for x, _ in group)
        inputs = torch.zeros(len(group), width, dtype=torch.long)
        targets = torch.full((len(group), width), -100, dtype=torch.long)
        for row, (x, y) in enumerate(group):
            inputs[row, : len(x)], targets[row, : len(y)] = torch.tensor(x), torch.tensor(y)
        logits = model(input_ids=inputs).logits
        nll += torch.nn.functional.cross_entropy(
            logits.transpose(1, 2), targets, ignore_index=-100, reduction="sum"
        ).item()
    return nll / n_bytes / math.log(2)


def stage1(model, stream: torch.Tensor, args) -> float:
    """Body frozen; only embeddings + head in the optimizer; identical batches for every method."""
    for p in model.parameters():
        p.requires_grad_(False)
    trainable = [model.get_input_embeddings().weight, model.get_output_embeddings().weight]
    for p in trainable:
        p.requires_grad_(True)
    opt = torch.optim.AdamW(trainable, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(1234)
    model.train()
    start = time.perf_counter()
    for step in range(args.steps):
        for group in opt.param_groups:
            group["lr"] = args.lr * min(1.0, (step + 1) / args.warmup)
        offsets = torch.randint(0, len(stream) - args.seq - 1, (args.batch,), generator=gen)
        rows = torch.stack([stream[o : o + args.seq + 1] for o in offsets.tolist()])
        logits = model(input_ids=rows[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), rows[:, 1:].flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    ap.add_argument("--methods", default="random,mean,align,focus")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--eval-chars", type=int, default=4000, help="characters kept of each nb-valid document")
    ap.add_argument("--threads", type=int, default=1)
    return ap.parse_args()


def run_method(method: str, base: Path, old, new, mapping, data: dict, args) -> dict:
    """Init one fresh copy of the base model with `method`, score it, train stage 1, score again."""
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    stamp = time.perf_counter()
    config = EmbeddingConfig(**METHOD_CONFIGS[method])
    model, report = transfer_embeddings(model, old, new, config, corpus=data["corpus"], mapping=mapping)
    init_s = time.perf_counter() - stamp
    step0 = bits_per_byte(model, data["eval"], data["bytes"])
    train_s = stage1(model, data["stream"], args)
    after = bits_per_byte(model, data["eval"], data["bytes"])
    print(
        f"  {method:7s} init {init_s:6.1f} s  bpb step0 {step0:.4f}  after stage 1 {after:.4f}  ({train_s:.0f} s)",
        flush=True,
    )
    return {
        "init_s": init_s,
        "step0": step0,
        "after": after,
        "train_s": train_s,
        "extra": report.get(method, {}),
    }


def print_results(results: dict, base_bpb: float, args) -> None:
    print(
        f"\nnb-valid bits/byte; stage 1 = {args.steps} steps x {args.batch} x {args.seq} tokens, lr {args.lr}"
    )
    print(f"base model, its English tokenizer, step 0: {base_bpb:.4f}")
    print(f"{'method':8s} {'init s':>7s} {'step 0':>8s} {'stage 1':>8s} {'vs random':>9s}")
    ref = results.get("random", {}).get("after")
    for method, r in results.items():
        rel = f"{r['after'] / ref:.3f}" if ref else "-"
        print(f"{method:8s} {r['init_s']:7.1f} {r['step0']:8.4f} {r['after']:8.4f} {rel:>9s}")
    for method, r in results.items():
        if r["extra"]:
            print(f"{method} details: {r['extra']}")
    value = results.get("mean", {}).get("after")
    ratio = round(value / ref, 4) if value and ref else None
    line = {"benchmark": "embedding_init", "metric": "nb_bpb_after_stage1", "value": value, "baseline": ref}
    print(json.dumps({**line, "ratio": ratio, "unit": "bits/byte"}))


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    base = args.shared / "models" / "tiny-en-llama"
    old = AutoTokenizer.from_pretrained(base)
    train = [("nb", t) for t in read(args.shared, "nb.debian-handbook.train")]
    train += [("nn", t) for t in read(args.shared, "nn.gimp-help.train")]
    stamp = time.perf_counter()
    new, how = new_tokenizer(old, train)
    print(f"new tokenizer: {len(new)} tokens via {how} in {time.perf_counter() - stamp:.1f} s")
    mapping = build_mapping(old, new)
    print("mapping:", mapping.summary())

    valid = [t[: args.eval_chars] for t in read(args.shared, "nb.debian-handbook.valid")]
    ids = [i for _, t in train for i in new(t, add_special_tokens=False)["input_ids"] + [new.eos_token_id]]
    data = {
        "corpus": [t for _, t in train],
        "eval": windows(new, valid, args.seq),
        "bytes": sum(len(t.encode("utf-8")) for t in valid),
        "stream": torch.tensor(ids),
    }
    base_model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    base_bpb = bits_per_byte(base_model, windows(old, valid, args.seq), data["bytes"])
    print(
        f"eval: {data['bytes']} bytes of nb valid, {len(data['eval'])} windows; train stream {len(ids)} tokens"
    )
    results = {m: run_method(m, base, old, new, mapping, data, args) for m in args.methods.split(",")}
    print_results(results, base_bpb, args)


if __name__ == "__main__":
    main()
