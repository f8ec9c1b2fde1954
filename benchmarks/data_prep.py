"""Pre-tokenisation benchmark: `encode_corpus` vs a plain `datasets.map`, and its memory profile.

1. Throughput (MB of UTF-8 text per second) on the same text, side by side in one process,
   alternating the two so that machine noise hits both: `encode_corpus` (read .jsonl.gz, tokenise,
   pack with EOS, write uint16 shards + offsets, all cores) against `Dataset.map(batched=True)`
   with the same fast tokenizer (`tokenizers` uses every core inside each batch). The baseline is
   timed on an already loaded in-memory Dataset, i.e. without reading the corpus: that favours it.
2. Peak RSS of `encode_corpus` (parent and worker processes, each run in a fresh process) for
   generated corpora of increasing size: it must stay flat, far below the corpus size.

Text: the ../shared corpus pack (all train files) and the tiny-en-llama tokenizer; without them
the benchmark says so and exits 0. Last line: one JSON object (format in benchmarks/README.md).

    python benchmarks/data_prep.py [--rounds 2] [--sizes-mb 16,64,128]
    python benchmarks/data_prep.py --smoke   # seconds: 200 documents, one round, a 1 MB profile (CI)
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
sys.path.insert(0, str(REPO))

from langadapt.data.documents import write_documents
from langadapt.data.shards import encode_corpus

TOKENIZER = SHARED / "models" / "tiny-en-llama"


def shared_texts() -> list[str]:
    """Every train document of the corpus pack."""
    texts = []
    for path in sorted((SHARED / "corpora").glob("*.train.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            texts.extend(json.loads(line)["text"] for line in f)
    return texts


def write_data_dir(root: Path, texts: list[str], copies: int = 1) -> int:
    """A data-stage output folder holding `texts` (repeated `copies` times); returns text bytes."""
    def docs():
        for c in range(copies):
            for i, text in enumerate(texts):
                yield {"id": f"{c}-{i}", "text": text, "lang": "xx", "source": "bench", "role": "target"}

    write_documents(root / "train" / "bench.jsonl.gz", docs())
    return copies * sum(len(t.encode("utf-8")) for t in texts)


def time_ours(data_dir: Path, out: Path) -> float:
    start = time.perf_counter()
    encode_corpus(TOKENIZER, data_dir, out, include_valid=False)
    return time.perf_counter() - start


def time_baseline(dataset, tokenizer) -> float:
    start = time.perf_counter()
    dataset.map(lambda batch: tokenizer(batch["text"]), batched=True, remove_columns=["text"],
                load_from_cache_file=False, keep_in_memory=True)
    return time.perf_counter() - start


def throughput(texts: list[str], rounds: int, work: Path) -> tuple[float, float, int]:
    """Best-of-`rounds` MB/s for ours and the baseline, measured alternately."""
    import datasets
    from transformers import AutoTokenizer

    datasets.disable_progress_bars()
    nbytes = write_data_dir(work / "data", texts)
    tokenizer = AutoTokenizer.from_pretrained(str(TOKENIZER))
    dataset = datasets.Dataset.from_dict({"text": texts})
    ours, base = [], []
    for r in range(rounds):
        base.append(time_baseline(dataset, tokenizer))
        ours.append(time_ours(work / "data", work / f"tokens{r}"))
        print(f"  round {r + 1}: encode_corpus {nbytes / ours[-1] / 1e6:6.2f} MB/s, "
              f"datasets.map {nbytes / base[-1] / 1e6:6.2f} MB/s", flush=True)
    return nbytes / min(ours) / 1e6, nbytes / min(base) / 1e6, nbytes


def peak_rss(texts: list[str], target_mb: int, work: Path) -> dict:
    """Encode a corpus of about `target_mb` MB in a fresh process; its peak RSS and workers'.

    Workers are spawned from that small fresh process, so their ru_maxrss is their own peak.
    """
    one_copy = sum(len(t.encode("utf-8")) for t in texts)
    copies = max(1, round(target_mb * 1e6 / one_copy))
    data = work / f"rss{target_mb}"
    nbytes = write_data_dir(data, texts, copies)
    script = (
        "import json, resource, sys, time\n"
        "from pathlib import Path\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "from langadapt.data.shards import encode_corpus\n"
        "t = time.perf_counter()\n"
        f"s = encode_corpus({str(TOKENIZER)!r}, Path({str(data)!r}), Path({str(data / 'tok')!r}), include_valid=False)\n"
        # VmHWM, not ru_maxrss: Linux keeps the pre-exec (forked benchmark) peak in ru_maxrss.
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]\n"
        "print(json.dumps({'parent_kb': int(hwm),\n"
        "  'workers_kb': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,\n"
        "  'seconds': time.perf_counter() - t, 'workers': s['workers'],\n"
        "  'tokens': s['sources']['bench']['num_tokens']}))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True)
    stats = json.loads(result.stdout.strip().splitlines()[-1])
    stats["text_mb"] = nbytes / 1e6
    return stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="alternating timing rounds (best is kept)")
    parser.add_argument("--sizes-mb", default="16,64,128", help="generated corpus sizes for the RSS profile")
    parser.add_argument("--docs", type=int, default=None, help="only the first N documents of the pack")
    parser.add_argument("--smoke", action="store_true",
                        help="200 documents, one round, a 1 MB profile: the script's path in seconds (CI)")
    args = parser.parse_args()
    if args.smoke:
        args.rounds, args.sizes_mb, args.docs = 1, "1", 200
    if not (SHARED / "corpora").is_dir() or not (TOKENIZER / "tokenizer.json").is_file():
        print(f"data_prep: skipped: ../shared corpus pack or tiny-en-llama not found at {SHARED}")
        print(json.dumps({"benchmark": "data_prep", "metric": "tokenise_pack_throughput", "value": None,
                          "baseline": None, "ratio": None, "unit": "MB/s", "skipped": "no ../shared"}))
        return
    texts = shared_texts()[: args.docs]
    print(f"data_prep: {len(texts)} documents, {os.cpu_count()} cores, tokenizer tiny-en-llama (8k byte-level BPE)")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        ours, base, nbytes = throughput(texts, args.rounds, work)
        profile = [peak_rss(texts, int(mb), work) for mb in args.sizes_mb.split(",")]
    print()
    print(f"{'throughput on ' + format(nbytes / 1e6, '.1f') + ' MB':<40}{'MB/s':>10}")
    print(f"{'encode_corpus (tiktoken path, shards)':<40}{ours:>10.2f}")
    print(f"{'datasets.map(batched=True), fast tok.':<40}{base:>10.2f}")
    print(f"{'ratio':<40}{ours / base:>10.2f}x")
    print()
    print(f"{'corpus MB':>10}{'tokens':>12}{'MB/s':>8}{'parent RSS MB':>15}{'worker RSS MB':>15}")
    for p in profile:
        print(f"{p['text_mb']:>10.0f}{p['tokens']:>12}{p['text_mb'] / p['seconds']:>8.2f}"
              f"{p['parent_kb'] / 1024:>15.0f}{p['workers_kb'] / 1024:>15.0f}")
    print(json.dumps({
        "benchmark": "data_prep", "metric": "tokenise_pack_throughput", "value": round(ours, 3),
        "baseline": round(base, 3), "ratio": round(ours / base, 3), "unit": "MB/s",
        "peak_rss_mb": {f"{p['text_mb']:.0f}MB": round(max(p["parent_kb"], p["workers_kb"]) / 1024) for p in profile},
    }))


if __name__ == "__main__":
    main()
