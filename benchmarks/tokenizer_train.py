"""Benchmark: training a BPE tokenizer with langadapt vs `sentencepiece`, side by side.

Same text, same vocabulary size, each run in its own subprocess (so peak RSS is honest and one
run's caches do not help the next), engines interleaved over several rounds; the table shows
medians. Fertility (tokens per word) of every trained tokenizer is measured on Bokmål held-out
text (nb.debian-handbook.valid) so speed is never bought with a worse vocabulary.

    python benchmarks/tokenizer_train.py [--corpora nbnn pack] [--vocab-size 8000] [--rounds 3]
    python benchmarks/tokenizer_train.py --smoke   # seconds: every engine once on ~60 kB, vocab 500 (CI)

Corpora: `nbnn` = nb+nn train text (the Norwegian job, ~1.3 MB); `pack` = every train file of
the corpus pack (~23 MB). sentencepiece gets the text one line per
sentence (its input format) with max_sentence_length raised so that no line is skipped;
langadapt gets whole documents. The last line is the JSON record for `pack` (or the last corpus
run): ours = langadapt's default family (byte-level BPE), baseline = sentencepiece BPE.

`--smoke` runs every engine once (each in its own process, as always) on the `smoke` corpus (the
nn held-out file) at vocab 500: it checks the script still runs, its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPORA_DIR = REPO.parent / "shared" / "corpora"
CORPORA = {
    "nbnn": ["nb.debian-handbook.train", "nn.gimp-help.train"],
    "pack": ["da.gimp-help.train", "en.debian-handbook.train", "en.debian-reference.train", "en.gimp-help.train",
             "en.python-docs.train", "fi.gimp-help.train", "nb.debian-handbook.train", "nn.gimp-help.train",
             "sv.debian-handbook.train", "sv.gimp-help.train"],
    "smoke": ["nn.gimp-help.valid"],  # --smoke: ~60 kB
}
ENGINES = ("sentencepiece", "langadapt:byte_bpe", "langadapt:sentencepiece_bpe", "tokenizers:direct")
"""tokenizers:direct = the textbook way: documents straight into `train_from_iterator` (byte-level BPE)."""
VALID = "nb.debian-handbook.valid"


def read_texts(name: str) -> list[tuple[str, str]]:
    with gzip.open(CORPORA_DIR / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
        return [(name.split(".")[0], json.loads(line)["text"]) for line in f]


def rss_mb() -> float:
    """Current resident memory of this process (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def worker(engine: str, corpus: str, vocab_size: int, out: Path) -> None:
    """One training run; prints a JSON line with seconds, peak RSS and RSS before training."""
    texts = [pair for name in CORPORA[corpus] for pair in read_texts(name)]
    import tokenizers  # noqa: F401  (every engine's imports are paid before the clock starts)
    if engine == "sentencepiece":
        import sentencepiece as spm

        lines = [line for _, text in texts for line in text.split("\n") if line.strip()]
        longest = max(len(line.encode("utf-8")) for line in lines)
        before = rss_mb()
        start = time.perf_counter()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines), model_prefix=str(out / "sp"), vocab_size=vocab_size,
            model_type="bpe", byte_fallback=True, num_threads=os.cpu_count() or 1,
            max_sentence_length=longest + 1, minloglevel=2)
    elif engine == "tokenizers:direct":
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        before = rss_mb()
        start = time.perf_counter()
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                      special_tokens=["<s>", "</s>", "<pad>"],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tokenizer.train_from_iterator((text for _, text in texts), trainer=trainer)
        tokenizer.save(str(out / "tokenizer.json"))
    else:
        from transformers import PreTrainedTokenizerFast  # noqa: F401  (imported lazily by assemble: ~1 s)

        from langadapt.recipe.tokenizer import TokenizerConfig
        from langadapt.tokenizer.train import train_tokenizer

        kind = engine.split(":")[1]
        before = rss_mb()
        start = time.perf_counter()
        train_tokenizer(TokenizerConfig(kind=kind, vocab_size=vocab_size), texts, None).save_pretrained(str(out))
    seconds = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "peak_rss_mb": peak_mb, "rss_before_mb": before,
                      "text_mb": sum(len(t.encode("utf-8")) for _, t in texts) / 1e6}))


def fertility(engine: str, out: Path, valid: list[str]) -> float:
    words = sum(len(text.split()) for text in valid)
    if engine == "sentencepiece":
        import sentencepiece as spm

        processor = spm.SentencePieceProcessor(model_file=str(out / "sp.model"))
        return sum(len(processor.encode(text)) for text in valid) / words
    from tokenizers import Tokenizer

    from langadapt.tokenizer.metrics import tokenizer_metrics

    return tokenizer_metrics(Tokenizer.from_file(str(out / "tokenizer.json")), valid)["fertility"]


def run_once(engine: str, corpus: str, vocab_size: int, valid: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, __file__, "--worker", engine, "--corpora", corpus,
                   "--vocab-size", str(vocab_size), "--out", tmp]
        done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=False,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
        if done.returncode != 0:
            raise SystemExit(f"{engine} on {corpus} failed:\n{done.stderr[-3000:]}")
        record = json.loads(done.stdout.strip().splitlines()[-1])
        record["fertility"] = fertility(engine, Path(tmp), valid)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", nargs="+", choices=sorted(CORPORA), default=["nbnn", "pack"])
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    parser.add_argument("--worker", choices=ENGINES, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true",
                        help="every engine once on ~60 kB at vocab 500: the script's path in seconds (CI), not a measurement")
    args = parser.parse_args()
    if args.smoke and not args.worker:
        args.corpora, args.vocab_size, args.rounds = ["smoke"], 500, 1
    if args.worker:
        return worker(args.worker, args.corpora[0], args.vocab_size, args.out)
    if not CORPORA_DIR.is_dir():
        print(f"corpus pack not found at {CORPORA_DIR}: nothing measured")
        print(json.dumps({"benchmark": "tokenizer_train", "metric": "train_seconds", "value": None, "baseline": None,
                          "ratio": None, "unit": "s", "skipped": "no ../shared"}))
        return
    valid = [text for _, text in read_texts(VALID)]
    results: dict[tuple[str, str], list[dict]] = {}
    for corpus in args.corpora:
        for round_ in range(args.rounds):
            order = args.engines if round_ % 2 == 0 else list(reversed(args.engines))  # no engine always first
            for engine in order:
                results.setdefault((corpus, engine), []).append(run_once(engine, corpus, args.vocab_size, valid))
    print(f"{'corpus':7} {'engine':30} {'text MB':>8} {'train s':>8} {'(min-max)':>13} {'peak RSS MB':>11} "
          f"{'+MB training':>12} {'nb fertility':>12}   (vocab {args.vocab_size}, median of {args.rounds}, "
          f"{os.cpu_count()} cores)")
    summary = {}
    for (corpus, engine), runs in results.items():
        seconds = [r["seconds"] for r in runs]
        summary[(corpus, engine)] = statistics.median(seconds)
        print(f"{corpus:7} {engine:30} {runs[0]['text_mb']:8.1f} {statistics.median(seconds):8.2f} "
              f"{min(seconds):6.2f}-{max(seconds):<6.2f} {max(r['peak_rss_mb'] for r in runs):11.0f} "
              f"{max(r['peak_rss_mb'] - r['rss_before_mb'] for r in runs):12.0f} {runs[0]['fertility']:12.3f}")
    corpus = "pack" if "pack" in args.corpora else args.corpora[-1]
    ours, baseline = summary.get((corpus, "langadapt:byte_bpe")), summary.get((corpus, "sentencepiece"))
    print(json.dumps({"benchmark": "tokenizer_train", "metric": "train_seconds", "value": ours,
                      "baseline": baseline, "ratio": ours / baseline if ours and baseline else None,
                      "unit": "s", "corpus": corpus, "vocab_size": args.vocab_size}))


if __name__ == "__main__":
    main()
