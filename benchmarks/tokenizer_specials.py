"""Benchmark: `tokenizer.keep_specials` used vs all, for a replacement tokenizer on real bases.

A replacement vocabulary (`tokenizer.kind: inherit`) starts with the base's special tokens. For
each base (Mistral-7B SentencePiece in the Hub's legacy form, Mistral-Nemo Tekken with 1,000
reserved ids, GPT-2, and a Llama-3-style base: GPT-2's byte-level BPE + Llama-3's 256 specials and
chat template), an N-token tokenizer is trained on the Bokmål train split with each setting, and
measured side by side:
- specials kept, and their share of the vocabulary (ids the language cannot use),
- fertility (tokens per word) and tokens per byte on the held-out Bokmål split,
- the ratio used/all of both.

    python benchmarks/tokenizer_specials.py [--vocab-size 8192] [--bases mistral-sp-legacy,...]
    python benchmarks/tokenizer_specials.py --smoke   # seconds: the Llama-3-style base, 10 documents (CI)

`--smoke` runs one base at a tiny size: it checks the script still runs, its numbers mean nothing.
Skips (exit 0, a reason on stderr, a JSON line of nulls) when ../shared is missing. The last line is the JSON record:
nb fertility with `used` / with `all` on the base with the most specials (Tekken).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
sys.path[:0] = [str(REPO), str(REPO / "tests")]
BASES = ("mistral-sp-legacy", "nemo-tekken", "gpt2-tied", "llama3-style")
SETTINGS = ("used", "all")


def read(name: str) -> list[str]:
    with gzip.open(SHARED / "corpora" / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


def load_base(name: str, root: Path) -> Any:
    """The base tokenizer, built from ../shared/tokenizers as its Hub repository lays it out."""
    from helpers.real_bases import BASES as REAL
    from helpers.real_bases import build_tokenizer_folder
    from helpers.special_bases import write_llama3_style_base

    from langadapt.tokenizer.loading import load_tokenizer

    if name == "llama3-style":
        gpt2 = load_tokenizer(build_tokenizer_folder(REAL["gpt2-tied"], SHARED, root / "gpt2"))
        return load_tokenizer(write_llama3_style_base(json.loads(gpt2.backend_tokenizer.to_str()), root / name))
    return load_tokenizer(build_tokenizer_folder(REAL[name], SHARED, root / name))


def measure(base: Any, setting: str, vocab_size: int, train: list[str], valid: list[str]) -> dict[str, Any]:
    from langadapt.recipe.tokenizer import TokenizerConfig
    from langadapt.tokenizer.metrics import tokenizer_metrics
    from langadapt.tokenizer.specials import specials_report
    from langadapt.tokenizer.train import train_tokenizer

    start = time.perf_counter()
    config = TokenizerConfig(vocab_size=vocab_size, keep_specials=setting, min_vocab_fraction=0.0)
    tokenizer = train_tokenizer(config, [("nb", t) for t in train], base)
    seconds = time.perf_counter() - start
    kept = specials_report(config, base, tokenizer)["kept"]
    metrics = tokenizer_metrics(tokenizer, valid)
    return {"vocab": len(tokenizer), "specials": kept, "share": kept / len(tokenizer),
            "fertility": metrics["fertility"], "tokens_per_byte": 1 / metrics["bytes_per_token"],
            "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab-size", type=int, default=8192)
    parser.add_argument("--bases", default=",".join(BASES))
    parser.add_argument("--docs", type=int, default=None, help="only the first N train and held-out documents")
    parser.add_argument("--smoke", action="store_true",
                        help="one base, vocab 1024, 10 documents: the script's path in seconds (CI), not a measurement")
    args = parser.parse_args()
    if args.smoke:
        args.bases, args.vocab_size, args.docs = "llama3-style", 1024, 10
    if not (SHARED / "tokenizers").is_dir() or not (SHARED / "corpora").is_dir():
        print(f"skipped: {SHARED} (tokenizers and corpora) is missing", file=sys.stderr)
        print(json.dumps({"benchmark": "tokenizer_specials", "metric": "nb fertility, keep_specials used",
                          "value": None, "baseline": None, "ratio": None, "unit": "tokens/word",
                          "skipped": "no ../shared"}))
        return
    train = read("nb.debian-handbook.train")[: args.docs]
    valid = read("nb.debian-handbook.valid")[: args.docs]
    results: dict[str, dict[str, dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.bases.split(","):
            base = load_base(name, Path(tmp))
            results[name] = {s: measure(base, s, args.vocab_size, train, valid) for s in SETTINGS}
    print(f"replacement tokenizer, vocab_size={args.vocab_size:,}, trained on nb.debian-handbook.train, "
          "fertility on nb.debian-handbook.valid")
    header = (f"{'base':<18} {'setting':<7} {'vocab':>6} {'specials':>8} {'share':>6} {'fertility':>9} "
              f"{'tok/byte':>8} {'s':>5}")
    print(header)
    print("-" * len(header))
    for name, per in results.items():
        for setting, r in per.items():
            print(f"{name:<18} {setting:<7} {r['vocab']:>6,} {r['specials']:>8,} {r['share']:>6.1%} {r['fertility']:>9.4f} "
                  f"{r['tokens_per_byte']:>8.4f} {r['seconds']:>5.1f}")
        used, every = per["used"], per["all"]
        print(f"{'':<18} used/all fertility {used['fertility'] / every['fertility']:.4f}, "
              f"tokens/byte {used['tokens_per_byte'] / every['tokens_per_byte']:.4f}")
    headline = max(results, key=lambda n: results[n]["all"]["specials"])
    used, every = results[headline]["used"], results[headline]["all"]
    print(json.dumps({"benchmark": "tokenizer_specials", "metric": f"nb fertility, {headline}, keep_specials used",
                      "value": round(used["fertility"], 4), "baseline": round(every["fertility"], 4),
                      "ratio": round(used["fertility"] / every["fertility"], 4), "unit": "tokens/word",
                      "specials": {n: {s: r["specials"] for s, r in per.items()} for n, per in results.items()}}))


if __name__ == "__main__":
    main()
