"""Benchmark: held-out fertility vs the size of the tokenizer's training sample.

Why: `tokenizer.max_training_chars` has a default bound (`DEFAULT_MAX_TRAINING_CHARS`) so that a
recipe that sets nothing does not count 500 GB of text to learn 32k tokens. This measures where
more text stops buying a better vocabulary: for each corpus, tokenizers are trained (kind inherit,
base models/tiny-en-llama, the default seed-hashed bottom-k sample) on growing samples, and their
fertility (tokens per word) is measured on the packs' held-out text. The plateau of a series is
the smallest sample whose fertility is within 0.5% of the largest sample's.

    python benchmarks/tokenizer_sample_bound.py [--generated DIR] [--smoke]

Series: `nb` (the Bokmål pack, ~0.6 MB), `en` (every English pack, ~21 MB), and with --generated
a corpus written by a generator that repeats the packs with a copy number per document (nb.jsonl.gz,
en.jsonl.gz, e.g. 1 GB). Note: such a corpus holds no words the packs do not, so its plateau is at
most the packs' size; it measures the cost side (training time flat above the bound), the
natural-text series measure the benefit side. The last line is the JSON record: value = the
largest plateau measured (characters), baseline = the default bound.
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
CORPORA = SHARED / "corpora"
BASE = SHARED / "models" / "tiny-en-llama"
PLATEAU = 0.005
"""A sample is on the plateau when its fertility is within 0.5% of the largest sample's."""


def read_pack(lang: str, split: str) -> list[str]:
    """Texts of every pack of `lang` for `split` (train or valid), in file-name order."""
    texts = []
    for path in sorted(CORPORA.glob(f"{lang}.*.{split}.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            texts += [json.loads(line)["text"] for line in f]
    return texts


def stream_generated(folder: Path) -> Iterator[tuple[str, str]]:
    """(lang, text) of a generated corpus, streamed (it may be far larger than memory)."""
    for lang in ("nb", "en"):
        with gzip.open(folder / f"{lang}.jsonl.gz", "rt", encoding="utf-8") as f:
            for line in f:
                yield lang, json.loads(line)["text"]


def measure(series: str, texts: object, sizes: list[int | str], vocab: int, weights: dict[str, float] | None,
            held_out: dict[str, list[str]], base: object) -> list[dict]:
    """Train one tokenizer per sample size; fertility per held-out language, and seconds."""
    from langadapt.recipe.tokenizer import TokenizerConfig
    from langadapt.tokenizer.metrics import tokenizer_metrics
    from langadapt.tokenizer.train import train_tokenizer

    rows = []
    for size in sizes:
        config = TokenizerConfig(vocab_size=vocab, language_weights=weights, max_training_chars=size,
                                 min_vocab_fraction=0.0)
        pairs = texts() if callable(texts) else texts
        start = time.perf_counter()
        tokenizer = train_tokenizer(config, pairs, base, seed=0)
        seconds = time.perf_counter() - start
        fert = {lang: tokenizer_metrics(tokenizer, docs)["fertility"] for lang, docs in held_out.items()}
        rows.append({"series": series, "vocab": vocab, "sample": size, "vocab_reached": len(tokenizer),
                     "train_s": round(seconds, 1), "fertility": fert})
        print(f"  {series:<8} vocab {vocab:>6} sample {_chars(size):>8}  {len(tokenizer):>6} tokens  "
              f"{seconds:6.1f} s  " + "  ".join(f"{k} {v:.4f}" for k, v in fert.items()), flush=True)
    return rows


def plateau(rows: list[dict], lang: str) -> int:
    """The smallest sample (characters) whose fertility on `lang` is within PLATEAU of the largest's."""
    final = rows[-1]["fertility"][lang]
    for row in rows:
        if row["fertility"][lang] <= final * (1 + PLATEAU):
            return row["sample"] if isinstance(row["sample"], int) else row["chars"]
    return rows[-1]["chars"]


def _chars(size: int | str) -> str:
    return size if isinstance(size, str) else f"{size / 1e6:g}M"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generated", type=Path, help="folder with nb.jsonl.gz and en.jsonl.gz (e.g. 1 GB)")
    parser.add_argument("--smoke", action="store_true", help="one small series (< 30 s)")
    args = parser.parse_args()
    if not CORPORA.is_dir() or not BASE.is_dir():
        print(f"skipped: {CORPORA} or {BASE} is missing (the shared corpus packs and tiny base model)")
        print(json.dumps({"benchmark": "tokenizer_sample_bound", "metric": "fertility_plateau_chars", "value": None,
                          "baseline": None, "ratio": None, "unit": "chars"}))
        return 0
    from langadapt.recipe.tokenizer import DEFAULT_MAX_TRAINING_CHARS
    from langadapt.tokenizer.loading import load_tokenizer

    base = load_tokenizer(str(BASE), what="base")
    held = {lang: read_pack(lang, "valid") for lang in ("nb", "en")}
    nb, en = [("nb", t) for t in read_pack("nb", "train")], [("en", t) for t in read_pack("en", "train")]
    print("fertility (tokens per word) on the packs' held-out text, by training sample (characters):")
    plateaus: dict[str, int] = {}
    if args.smoke:
        runs = [("nb", nb, [50_000, 200_000, "all"], 2000, None, {"nb": held["nb"]})]
    else:
        runs = [("nb", nb, [50_000, 100_000, 200_000, 400_000, "all"], 8192, None, {"nb": held["nb"]}),
                *[("en", en, [250_000, 500_000, 1_000_000, 2_000_000, 4_000_000, 8_000_000, 16_000_000, "all"],
                   vocab, None, {"en": held["en"]}) for vocab in (8192, 32768)]]
    for series, texts, steps, vocab, weights, held_out in runs:
        rows = measure(series, texts, steps, vocab, weights, held_out, base)
        total = sum(len(t) for _, t in texts)
        for row in rows:
            row["chars"] = total if row["sample"] == "all" else min(row["sample"], total)
        plateaus[f"{series}/{vocab}"] = plateau(rows, series)
    if args.generated and not args.smoke:
        seen = {"chars": 0}

        def generated() -> Iterator[tuple[str, str]]:
            seen["chars"] = 0
            for lang, text in stream_generated(args.generated):
                seen["chars"] += len(text)
                yield lang, text
        steps = [4_000_000, 16_000_000, 64_000_000, 256_000_000, "all"]
        rows = measure("gen", generated, steps, 32768, {"nb": 0.7, "en": 0.3}, held, base)
        for row in rows:
            row["chars"] = min(row["sample"], seen["chars"]) if isinstance(row["sample"], int) else seen["chars"]
        plateaus["gen/32768"] = max(plateau(rows, "nb"), plateau(rows, "en"))
    print(f"\nplateau (within {PLATEAU:.1%} of the largest sample's fertility), characters:")
    for name, chars in plateaus.items():
        print(f"  {name:<10} {chars:>14,}")
    print(f"default bound (DEFAULT_MAX_TRAINING_CHARS): {DEFAULT_MAX_TRAINING_CHARS:,}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of this process: {peak:.0f} MB")
    value = max(plateaus.values())
    print(json.dumps({"benchmark": "tokenizer_sample_bound", "metric": "fertility_plateau_chars", "value": value,
                      "baseline": DEFAULT_MAX_TRAINING_CHARS, "ratio": round(value / DEFAULT_MAX_TRAINING_CHARS, 6),
                      "unit": "chars"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
