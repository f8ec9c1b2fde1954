"""Corpus-scale preparation benchmark (issue 37 item 1): CPU, wall and memory of the data and
tokenizer stages on generated corpora of 0.1-5 GB of text, with one worker and with every core.

What it measures, for each corpus size and each worker count (1 and every core this process may
use, `os.sched_getaffinity`):

- each stage (`langadapt run R --until data`, then `--until tokenizer`) as its own subprocess,
  so that its accounting is clean: user+sys CPU seconds and the largest process's peak RSS from
  `os.wait4` (the rusage of the child and of every descendant it reaped, i.e. its pool workers),
  and the process tree's RSS sampled with psutil every ~0.2 s (the parent's peak, and the peak of
  the sum over its worker processes: memory the node must have, which no single maxrss shows);
- each named part of a stage, as the stage's manifest reports it (`summary.parts`, written by
  `langadapt.run.timing.PartTimer`: wall and CPU seconds, workers included); a stage whose
  manifest has no parts yet is shown as its total only, and "other" is the stage's CPU that no
  part claims (start-up, imports, fingerprints);
- what grows with the corpus: every number of the summaries whose key says distinct/digest/
  unique/spill, per million documents or (for words) per million words.

Then the issue's goals as ratios: CPU-s per GB of text for data + tokenizer (goal <= 150), the
speed-up of every core over one worker (goal >= 1.7x on 2 cores), peak RSS at the largest size
over that at the smallest size of at least 0.5 GB (goal <= 1.25x), the tokenizer's training time
across sizes (goal: flat above the sample bound), and what the headline recipe's preparation
costs at that rate. Machines are noisy: quote the ratios, not the seconds of one run.

The corpus (see `generate_corpus`) is made from the real packs in ../shared/corpora: the nb
(target) and en (replay) train files, half of the text each, every document of the packs
repeated until the size is reached, each copy a different document whose new words make the
vocabulary grow as Heaps' law says (see `generate_language`: a prefix alone would keep the
pack's vocabulary at any size), split into several files as real corpora come, one of them a
large uncompressed .jsonl (the data stage cuts those into byte-range chunks). Corpora are cached
in the work dir (`--keep DIR`), so a 5 GB corpus is generated once; without `--keep` the work dir
is a temporary folder, deleted at the end. Without ../shared the benchmark says so, prints the
record with null values and exits 0.

    python benchmarks/data_scale.py [--sizes-gb 0.1,0.5,1,5] [--workers 1,all] [--keep DIR]
    python benchmarks/data_scale.py --smoke     # a few MB, 1 and 2 workers: every code path
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
CORPORA = SHARED / "corpora"
BASE_MODEL = SHARED / "models" / "tiny-en-llama"

#: Bump when the generator's output changes, so that cached corpora are not reused.
GENERATOR_VERSION = 4
#: Languages and their share of the text: the demo's target (nb) and its replay language (en).
LANGUAGES = (("nb", 0.5), ("en", 0.5))
#: Heaps' law exponent of the distinct-word growth the generator imitates (V ~ N^beta). Measured
#: values for natural-language corpora lie around 0.4-0.6; 0.5 is the usual middle.
HEAPS_BETA = 0.5
#: Share of the target language's text written into one uncompressed .jsonl (chunked by the stage).
BIG_FILE_SHARE = 0.25
WORD = re.compile(r"\w+")
#: Words that may be replaced by a new compound: letters only, 3 or more of them.
CANDIDATE = re.compile(r"[^\W\d_]{3,}")
#: The same words found in a document's JSON-escaped body, so that a copy is spliced there without
#: escaping it again: not right after a backslash or a word character (the "n" of an escaped
#: newline "\\n", the letters after "\\u00e5"), not before a word character.
BODY_CANDIDATE = re.compile(r"(?<![\\\w])[^\W\d_]{3,}(?!\w)")
#: A prime larger than any vocabulary squared the packs give: k -> k * PRIME mod L^2 is a bijection
#: (PRIME is coprime with L^2), so compound k is a different (first, second) pair for every k.
PRIME = 2_147_483_647
#: What the issue says the headline recipe (recipes/norwegian_warm.yaml) must prepare.
HEADLINE_GB = 500.0
HEADLINE_NODE_CORES = 128
#: Tokenizer parts that train it (the ones whose time should stay flat above the sample bound).
TRAINING_PARTS = ("sample", "sample_count", "count", "counting", "merges", "train")
SAMPLE_SECONDS = 0.2


# --------------------------------------------------------------------------------------------
# Corpus generator
# --------------------------------------------------------------------------------------------

@dataclass
class PackDoc:
    """One distinct document of a pack, with what writing a copy of it needs precomputed."""

    id: str
    text: str
    body: str  # the text as a JSON string body (escaped, without the quotes)
    nbytes: int  # UTF-8 bytes of the text
    nwords: int  # \\w+ words (what Heaps' law counts)
    starts: array  # where the words that may be replaced start in `body` (see BODY_CANDIDATE)
    ends: array  # and where they end


@dataclass
class Pack:
    """Every distinct train document of one language in ../shared/corpora."""

    lang: str
    docs: list[PackDoc]
    words: int  # N0: words of one pass over the pack
    distinct: int  # V0: distinct words of one pass
    vocab: list[str]  # the letter words compounds are made of, sorted (deterministic)


def load_pack(lang: str, corpora: Path = CORPORA) -> Pack:
    """Every train document of `lang` in the packs of `corpora` (see `build_pack`)."""
    def records() -> Iterator[tuple[str, str]]:
        for path in sorted(corpora.glob(f"{lang}.*.train.jsonl.gz")):
            with gzip.open(path, "rt", encoding="utf-8") as f:
                for number, line in enumerate(f):
                    record = json.loads(line)
                    yield str(record.get("id", f"{path.name}:{number}")), record["text"]

    pack = build_pack(lang, records())
    if not pack.docs:
        raise SystemExit(f"no {lang}.*.train.jsonl.gz in {corpora}")
    return pack


def build_pack(lang: str, records: Iterable[tuple[str, str]]) -> Pack:
    """A pack of (id, text) records, duplicate texts dropped.

    The en pack repeats ~40% of its pages verbatim (the same page in several python-docs
    folders): left in, every generated copy would carry them and the data stage would drop them
    as duplicates, so a "1 GB" corpus would hold much less text that survives cleaning.
    """
    docs: list[PackDoc] = []
    seen: set[str] = set()
    distinct: set[str] = set()
    for doc_id, text in records:
        if text in seen:
            continue
        seen.add(text)
        words = WORD.findall(text)
        distinct.update(words)
        body = json.dumps(text, ensure_ascii=False)[1:-1]
        starts, ends = array("i"), array("i")
        for match in BODY_CANDIDATE.finditer(body):
            starts.append(match.start())
            ends.append(match.end())
        docs.append(PackDoc(id=doc_id, text=text, body=body, nbytes=len(text.encode("utf-8")),
                            nwords=len(words), starts=starts, ends=ends))
    vocab = sorted({w for w in distinct if CANDIDATE.fullmatch(w)})
    return Pack(lang=lang, docs=docs, words=sum(d.nwords for d in docs), distinct=len(distinct), vocab=vocab)


def compound(pack: Pack, k: int) -> str:
    """The k-th new word of `pack`: two of its words joined (a different pair for every k).

    Norwegian writes compounds as one word (nettverk + kort = nettverkskort), and they are much
    of what makes its vocabulary keep growing with the corpus: a joined pair is a plausible new
    word form for the tokenizer's word counting, made of the language's own letters.
    """
    size = len(pack.vocab)
    x = (k * PRIME) % (size * size)
    return pack.vocab[x // size] + pack.vocab[x % size].lower()


def perturb(doc: PackDoc, pack: Pack, count: int, first: int, seed: str) -> tuple[str, int, int]:
    """`doc`'s JSON body with up to `count` of its letter words replaced by new compounds `first`,
    `first+1`, ...; returns the body, how many words were replaced and the text's UTF-8 bytes.

    Positions are drawn by a generator seeded with `seed` (a string: stable across processes,
    whatever PYTHONHASHSEED). At most half of a document's words are replaced, so it stays text.
    The body is spliced where the pack found the words (compounds are letters: nothing to escape),
    because re-scanning and re-escaping every document of every copy made a 0.1 GB corpus take a
    minute to write.
    """
    count = min(count, len(doc.starts) // 2)
    if count <= 0:
        return doc.body, 0, doc.nbytes
    chosen = sorted(random.Random(seed).sample(range(len(doc.starts)), count))
    pieces, end, nbytes = [], 0, doc.nbytes
    for j, index in enumerate(chosen):
        start, stop = doc.starts[index], doc.ends[index]
        new = compound(pack, first + j)
        pieces += [doc.body[end:start], new]
        nbytes += len(new.encode("utf-8")) - len(doc.body[start:stop].encode("utf-8"))
        end = stop
    pieces.append(doc.body[end:])
    return "".join(pieces), count, nbytes


@dataclass
class PlannedFile:
    """One file of a generated language: its name, its share of the text and whether gzipped."""

    name: str
    quota: int  # text bytes after which the writer moves on to the next file
    gzipped: bool


def plan_files(lang: str, target: int, file_bytes: int, big_share: float) -> list[PlannedFile]:
    """The files a language's `target` bytes of text go into.

    Real corpora come as many files, and the data stage parallelises over files and over byte
    ranges of big uncompressed ones: with `big_share` > 0 the first file is one uncompressed
    .jsonl of that share, the rest are gzip files of about `file_bytes` of text each, at least
    two of them so that even the smallest corpus has several files to share out.
    """
    files = []
    big = int(target * big_share)
    if big > 0:
        files.append(PlannedFile(f"{lang}-000.jsonl", big, gzipped=False))
    rest = target - big
    count = max(2, math.ceil(rest / file_bytes))
    files += [PlannedFile(f"{lang}-{len(files) + i:03d}.jsonl.gz", rest // count, gzipped=True)
              for i in range(count)]
    return files


class _Writer:
    """Writes lines into the planned files in turn, buffering ~1 MB per write (gzip level 1:
    the benchmark measures reading, not writing, and level 1 keeps generating a 5 GB corpus cheap)."""

    def __init__(self, folder: Path, files: list[PlannedFile]) -> None:
        self.folder, self.files, self.index = folder, files, -1
        self.handle: Any = None
        self.raw: Any = None
        self.written, self.buffer, self.buffered = 0, [], 0
        self._next()

    def _next(self) -> None:
        self._close()
        self.index += 1
        planned = self.files[self.index]
        path = self.folder / planned.name
        self.raw = open(path, "wb")  # noqa: SIM115 (open across write calls, closed by _close)
        # mtime=0: the same corpus is the same bytes, whenever it was generated.
        self.handle = gzip.GzipFile(fileobj=self.raw, mode="wb", compresslevel=1, mtime=0) \
            if planned.gzipped else self.raw
        self.written = 0

    def _flush(self) -> None:
        if self.buffer:
            self.handle.write("".join(self.buffer).encode("utf-8"))
            self.buffer, self.buffered = [], 0

    def _close(self) -> None:
        if self.handle is not None:
            self._flush()
            self.handle.close()
            self.raw.close()

    def write(self, line: str, text_bytes: int) -> None:
        if self.written >= self.files[self.index].quota and self.index + 1 < len(self.files):
            self._next()
        self.buffer.append(line)
        self.buffered += len(line)
        self.written += text_bytes
        if self.buffered >= 1 << 20:
            self._flush()

    def close(self) -> None:
        self._close()


def generate_language(pack: Pack, target: int, folder: Path, file_bytes: int, big_share: float,
                      beta: float = HEAPS_BETA) -> dict[str, Any]:
    """Write `target` bytes of text of one language into `folder`; returns what was written.

    Every document of the pack is written again and again, each time as a different document:
    copy c of a document gets the prefix "[c] " and the id "<lang>/<c>/<id>", so exact dedup
    keeps every one. A prefix alone would keep the vocabulary of the pack whatever the size (the
    tokenizer's word counting would then cost nothing more at 5 GB than at 0.1 GB), while real
    text keeps meeting new words (Heaps' law: V = V0 * (N / N0) ** beta). So, from the second
    copy on, words are replaced by new compounds (see `compound`), as many as it takes for the
    distinct words to follow Heaps' law with `beta`: after N words written, about
    V0 * (N / N0) ** beta distinct ones. (Swapping in a word of another document, the other idea,
    changes which documents hold a word but not how many distinct words there are.) Each new
    word is met once, as most of a real corpus's new words are (hapaxes).
    """
    files = plan_files(pack.lang, target, file_bytes, big_share)
    writer = _Writer(folder, files)
    written = docs = words = injected = 0
    copy = 0
    first_pass: set[str] = set()  # distinct words of copy 0 (the whole pack once it is complete)
    try:
        while written < target:
            prefix = f"[{copy}] "
            for i, doc in enumerate(pack.docs):
                if written >= target:
                    break
                words += doc.nwords + 1  # the prefix's number is a word too
                body, nbytes = doc.body, doc.nbytes
                if copy == 0:
                    first_pass.update(WORD.findall(doc.text))
                else:
                    want = int(pack.distinct * (words / pack.words) ** beta) - (pack.distinct + injected)
                    if want > 0:
                        body, done, nbytes = perturb(doc, pack, want, injected, f"{pack.lang}:{copy}:{i}")
                        injected += done
                doc_id = json.dumps(f"{pack.lang}/{copy}/{doc.id}", ensure_ascii=False)
                text_bytes = len(prefix) + nbytes
                writer.write(f'{{"id": {doc_id}, "text": "{prefix}{body}"}}\n', text_bytes)
                written += text_bytes
                docs += 1
            copy += 1
    finally:
        writer.close()
    return {"text_bytes": written, "docs": docs, "words": words, "copies": copy,
            "distinct_words": len(first_pass) + injected, "new_words": injected,
            "files": [f.name for f in files[:writer.index + 1]]}


def corpus_tag(size_gb: float) -> str:
    """The cache folder's name of a corpus: its size and the generator's version."""
    return f"corpus-{size_gb:g}gb-v{GENERATOR_VERSION}"


def generate_corpus(size_gb: float, root: Path, file_mb: float = 128.0, big_share: float = BIG_FILE_SHARE,
                    packs: dict[str, Pack] | None = None) -> tuple[Path, dict[str, Any]]:
    """The corpus of `size_gb` GB of text under `root` (generated once, then reused).

    A corpus is complete when its corpus.json exists (written last, after the folder was renamed
    into place), so an interrupted generation is started again rather than half reused.
    Returns its folder and its description (text bytes, documents and words per language).
    """
    folder = root / corpus_tag(size_gb)
    meta_path = folder / "corpus.json"
    params = {"size_gb": size_gb, "file_mb": file_mb, "big_share": big_share, "beta": HEAPS_BETA,
              "version": GENERATOR_VERSION, "languages": dict(LANGUAGES)}
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("params") == params:
            return folder, meta
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(folder, ignore_errors=True)
    partial.mkdir(parents=True)
    started = time.perf_counter()
    languages = {}
    for lang, share in LANGUAGES:
        pack = (packs or {}).get(lang) or load_pack(lang)
        languages[lang] = generate_language(pack, int(size_gb * 1e9 * share), partial,
                                            int(file_mb * 1e6), big_share if lang == LANGUAGES[0][0] else 0.0)
    partial.rename(folder)
    meta = {"params": params, "languages": languages, "seconds": round(time.perf_counter() - started, 1),
            "text_bytes": sum(m["text_bytes"] for m in languages.values()),
            "docs": sum(m["docs"] for m in languages.values()),
            "words": sum(m["words"] for m in languages.values())}
    meta_path.write_text(json.dumps(meta, indent=1), encoding="utf-8")
    return folder, meta


# --------------------------------------------------------------------------------------------
# Running the stages
# --------------------------------------------------------------------------------------------

def write_recipe(path: Path, name: str, corpus: Path, run_root: Path) -> Path:
    """The demo's recipe (warm start of tiny-en-llama, nb target + en replay, an inherited 8k
    tokenizer with language weights) pointed at a generated corpus: one glob per language."""
    path.write_text(f"""\
name: {name}
seed: 1234
init: warm
run_root: {run_root}
base_model: {{path: {BASE_MODEL}}}
data:
  sources:
    - {{name: nb, path: "{corpus}/nb-*.jsonl*", lang: nb, role: target}}
    - {{name: en, path: "{corpus}/en-*.jsonl*", lang: en, role: replay}}
  valid_fraction: 0.08
  replay: 0.2
tokenizer: {{kind: inherit, vocab_size: 8192, language_weights: {{nb: 0.7, en: 0.3}}}}
embeddings: {{method: mean}}
engine: {{kind: torch, precision: fp32}}
stage1: {{steps: 10, micro_batch_size: 4, seq_len: 128}}
stage2: {{steps: 10}}
evaluation: {{suites: [], cold_baseline: false}}
""", encoding="utf-8")
    return path


@dataclass
class Usage:
    """What one subprocess cost: wall, CPU (itself and its reaped descendants) and memory."""

    wall_s: float
    cpu_s: float
    maxrss_mb: float  # the largest single process of the tree (wait4's ru_maxrss)
    parent_peak_mb: float  # sampled: the stage's own process
    workers_peak_mb: float  # sampled: the largest sum over its descendants at one time
    tree_peak_mb: float  # sampled: the largest sum over the whole tree at one time


def _tree_rss(psutil: Any, root: Any) -> tuple[float, float]:
    """(RSS of `root`, summed RSS of its descendants) in bytes; processes that end meanwhile count 0."""
    try:
        parent = root.memory_info().rss
        children = root.children(recursive=True)
    except psutil.Error:
        return 0.0, 0.0
    total = 0.0
    for child in children:
        try:
            total += child.memory_info().rss
        except psutil.Error:
            pass
    return float(parent), total


def run_measured(command: list[str], log: Path, cwd: Path) -> tuple[int, Usage]:
    """Run `command`, sampling its process tree's RSS; returns its exit code and its `Usage`.

    `os.wait4` (not Popen.wait) reaps it, for the rusage of this one child and its descendants:
    RUSAGE_CHILDREN deltas would give the same CPU, but its ru_maxrss is the largest of every
    child this process ever had, which a second run could not lower.
    """
    import psutil

    started = time.perf_counter()
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=cwd)
    root = psutil.Process(proc.pid)
    parent_peak = workers_peak = tree_peak = 0.0
    while True:
        pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            break
        parent, workers = _tree_rss(psutil, root)
        parent_peak, workers_peak = max(parent_peak, parent), max(workers_peak, workers)
        tree_peak = max(tree_peak, parent + workers)
        time.sleep(SAMPLE_SECONDS)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    mb = 1024 * 1024
    return proc.returncode, Usage(
        wall_s=wall, cpu_s=rusage.ru_utime + rusage.ru_stime,
        maxrss_mb=rusage.ru_maxrss * 1024 / mb,  # Linux reports KiB
        parent_peak_mb=parent_peak / mb, workers_peak_mb=workers_peak / mb, tree_peak_mb=tree_peak / mb)


@dataclass
class StageResult:
    """One stage of one run: its usage, its parts and its manifest summary."""

    stage: str
    usage: Usage
    parts: dict[str, dict[str, float]] | None  # None: the manifest has no "parts" yet
    summary: dict[str, Any]
    manifest_wall_s: float | None


@dataclass
class RunResult:
    """Both stages of one corpus size with one worker count."""

    size_gb: float
    text_gb: float
    workers: int
    corpus: dict[str, Any]
    stages: list[StageResult] = field(default_factory=list)

    def cpu_s(self) -> float:
        return sum(s.usage.cpu_s for s in self.stages)

    def wall_s(self) -> float:
        return sum(s.usage.wall_s for s in self.stages)

    def peak_rss_mb(self) -> float:
        """The largest single process's peak RSS over both stages (what /usr/bin/time -v reports)."""
        return max(s.usage.maxrss_mb for s in self.stages)

    def tree_peak_mb(self) -> float:
        """The largest sampled sum of RSS over a stage's whole process tree."""
        return max(s.usage.tree_peak_mb for s in self.stages)

    def stage(self, name: str) -> StageResult | None:
        return next((s for s in self.stages if s.stage == name), None)


def read_manifest(run_dir: Path, stage: str) -> dict[str, Any]:
    """The stage's manifest.json ({} when missing or unreadable: the table then shows totals only)."""
    try:
        return json.loads((run_dir / stage / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def find_parts(summary: dict[str, Any]) -> Any:
    """The summary's `parts`: at its top, or one level down (e.g. `run.parts`), as stages place it."""
    if "parts" in summary:
        return summary["parts"]
    for value in summary.values():
        if isinstance(value, dict) and isinstance(value.get("parts"), dict):
            return value["parts"]
    return None


def parse_parts(summary: dict[str, Any]) -> dict[str, dict[str, float | None]] | None:
    """The summary's parts as {name: {"wall_s", "cpu_s"}} (None for a number a part lacks), or
    None when the summary has none (stages from before issue 37)."""
    parts = find_parts(summary)
    if not isinstance(parts, dict):
        return None
    out: dict[str, dict[str, float | None]] = {}
    for name, part in parts.items():
        if isinstance(part, dict):
            out[str(name)] = {key: None if part.get(key) is None else float(part[key]) for key in ("wall_s", "cpu_s")}
    return out


def timed_cpu(parts: dict[str, dict[str, float | None]]) -> float:
    """CPU seconds of the parts timed as parts of the stage (`PartTimer`: wall and CPU both).

    A part with CPU only (e.g. the workers' CPU, reported beside the part that waited for them)
    may already be inside a timed part's CPU (PartTimer counts reaped children), so it is shown
    but not subtracted from the stage's total to get "other"."""
    return sum(p["cpu_s"] or 0.0 for p in parts.values() if p["wall_s"] is not None)


def run_size(size_gb: float, workers: int, corpus: Path, meta: dict[str, Any], work: Path,
             keep_runs: bool) -> RunResult:
    """The data stage, then the tokenizer stage, of the corpus with `workers` workers."""
    name = f"scale-{size_gb:g}gb-w{workers}"
    run_root = work / "runs"
    run_dir = run_root / name
    shutil.rmtree(run_dir, ignore_errors=True)  # a fresh run: a finished one would skip every stage
    recipe = write_recipe(work / "recipes" / f"{name}.yaml", name, corpus, run_root)
    result = RunResult(size_gb=size_gb, text_gb=meta["text_bytes"] / 1e9, workers=workers, corpus=meta)
    for stage in ("data", "tokenizer"):
        log = work / "logs" / f"{name}.{stage}.log"
        command = [sys.executable, "-m", "langadapt.cli", "run", str(recipe), "--until", stage, "--set", f"data.num_workers={workers}"]
        code, usage = run_measured(command, log, cwd=work)
        if code != 0:
            tail = log.read_text(encoding="utf-8", errors="replace")[-3000:]
            raise SystemExit(f"{' '.join(command)} exited {code}; the end of {log}:\n{tail}")
        manifest = read_manifest(run_dir, stage)
        summary = manifest.get("summary") or {}
        result.stages.append(StageResult(stage=stage, usage=usage, parts=parse_parts(summary), summary=summary,
                                         manifest_wall_s=manifest.get("wall_seconds")))
    if not keep_runs:
        shutil.rmtree(run_dir, ignore_errors=True)
    return result


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------

GROWTH_KEY = re.compile(r"distinct|digest|unique|spill", re.IGNORECASE)


def flatten(tree: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted.key, value) for every leaf of a JSON tree."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from flatten(value, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, tree


def growth(result: RunResult) -> list[tuple[str, float, str]]:
    """(stage.key, value, value per million documents or words) for every number of the summaries
    whose key says what grows (distinct words, dedup digests, spills)."""
    rows = []
    for stage in result.stages:
        for key, value in flatten(stage.summary):
            if ".parts." in f".{key}" or not GROWTH_KEY.search(key):
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            per_words = "word" in key.lower()
            denominator = result.corpus["words"] if per_words else result.corpus["docs"]
            unit = "per M words" if per_words else "per M docs"
            rows.append((f"{stage.stage}.{key}", float(value),
                         f"{value / denominator * 1e6:,.0f} {unit}" if denominator else "-"))
    return rows


def table_rows(result: RunResult) -> list[list[str]]:
    """The table's rows of one run: each stage's total, then its parts and the rest ('other')."""
    gb = result.text_gb
    rows = []

    def fmt(x: float | None, digits: int = 1) -> str:
        return "-" if x is None else f"{x:,.{digits}f}"

    for stage in result.stages:
        u = stage.usage
        rows.append([f"{result.text_gb:.3f}", str(result.workers), stage.stage, "(total)", fmt(u.wall_s),
                     fmt(u.cpu_s), fmt(u.cpu_s / gb), fmt(u.parent_peak_mb, 0), fmt(u.workers_peak_mb, 0),
                     fmt(u.maxrss_mb, 0)])
        if stage.parts is None:
            rows.append(["", "", stage.stage, "(no parts in the manifest)", "", "", "", "", "", ""])
            continue
        for name, part in stage.parts.items():
            cpu = part["cpu_s"]
            rows.append(["", "", stage.stage, name if part["wall_s"] is not None else f"({name}: CPU only)",
                         fmt(part["wall_s"]), fmt(cpu), fmt(None if cpu is None else cpu / gb), "", "", ""])
        other = u.cpu_s - timed_cpu(stage.parts)
        rows.append(["", "", stage.stage, "other (start-up, imports, ...)", "", fmt(other), fmt(other / gb),
                     "", "", ""])
    both = result.cpu_s()
    rows.append(["", "", "data+tokenizer", "(total)", fmt(result.wall_s()), fmt(both), fmt(both / gb),
                 "", "", fmt(result.peak_rss_mb(), 0)])
    return rows


HEADER = ["text GB", "workers", "stage", "part", "wall s", "CPU s", "CPU s/GB", "parent peak RSS MB",
          "workers peak RSS MB", "max process RSS MB"]


def render(rows: list[list[str]], header: list[str] = HEADER) -> str:
    """A markdown table (readable as text, pastes into benchmarks/README.md)."""
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"

    return "\n".join([line(header), "| " + " | ".join("-" * w for w in widths) + " |", *map(line, rows)])


def training_cpu(result: RunResult) -> float | None:
    """CPU seconds of the tokenizer's training parts (None when the manifest has no such part)."""
    stage = result.stage("tokenizer")
    if stage is None or not stage.parts:
        return None
    found = [p["cpu_s"] or 0.0 for name, p in stage.parts.items() if name in TRAINING_PARTS]
    return sum(found) if found else None


def marginal_cpu_per_gb(results: list[RunResult]) -> float | None:
    """CPU seconds per additional GB between the smallest and the largest corpus of `results`
    (one worker count): what the headline's 500 GB costs, without each stage's fixed start-up
    (imports, loading the base tokenizer: seconds that a 0.1 GB run would spread over few GB)."""
    if len({r.size_gb for r in results}) < 2:
        return None
    small, big = min(results, key=lambda r: r.text_gb), max(results, key=lambda r: r.text_gb)
    return (big.cpu_s() - small.cpu_s()) / (big.text_gb - small.text_gb)


def summarise(results: list[RunResult], all_workers: int) -> tuple[list[str], dict[str, Any]]:
    """The goal lines and the last line's JSON object."""
    lines: list[str] = []
    sizes = sorted({r.size_gb for r in results})
    by = {(r.size_gb, r.workers): r for r in results}
    worker_counts = sorted({r.workers for r in results})
    low, high = worker_counts[0], worker_counts[-1]
    largest = sizes[-1]

    per_size: dict[str, Any] = {}
    for size in sizes:
        entry: dict[str, Any] = {}
        for workers in worker_counts:
            r = by.get((size, workers))
            if r is None:
                continue
            entry[f"w{workers}"] = {
                "text_gb": round(r.text_gb, 4), "cpu_s_per_gb": round(r.cpu_s() / r.text_gb, 1),
                "wall_s": round(r.wall_s(), 1), "max_process_rss_mb": round(r.peak_rss_mb()),
                "tree_peak_rss_mb": round(r.tree_peak_mb())}
        per_size[f"{size:g}GB"] = entry

    def cpu_per_gb(size: float, workers: int) -> float | None:
        r = by.get((size, workers))
        return None if r is None else r.cpu_s() / r.text_gb

    value = cpu_per_gb(largest, high)
    baseline = cpu_per_gb(largest, low) if low != high else None
    lines.append(f"CPU-s per GB of text, data + tokenizer, at {largest:g} GB: "
                 + ", ".join(f"{w} worker(s) {cpu_per_gb(largest, w):,.0f}" for w in worker_counts
                             if cpu_per_gb(largest, w) is not None) + "  (goal <= 150)")

    speedups = {}
    if low != high:
        for size in sizes:
            a, b = by.get((size, low)), by.get((size, high))
            if a and b:
                speedups[f"{size:g}GB"] = round(a.wall_s() / b.wall_s(), 2)
        lines.append(f"speed-up of {high} workers over {low} (wall, data + tokenizer): "
                     + ", ".join(f"{k} {v:.2f}x" for k, v in speedups.items())
                     + f"  (goal >= 1.7x on 2 cores; {all_workers} usable here)")

    rss_ratio = None
    reference = [s for s in sizes if s >= 0.5]
    if len(reference) >= 2:
        small, big = by.get((reference[0], high)), by.get((reference[-1], high))
        if small and big:
            rss_ratio = big.peak_rss_mb() / small.peak_rss_mb()
            lines.append(f"peak RSS at {reference[-1]:g} GB / at {reference[0]:g} GB ({high} workers): largest "
                         f"process {rss_ratio:.2f}x ({small.peak_rss_mb():,.0f} -> {big.peak_rss_mb():,.0f} MB), "
                         f"process tree {big.tree_peak_mb() / small.tree_peak_mb():.2f}x  (goal <= 1.25x)")
    else:
        lines.append("peak RSS growth: needs two sizes of at least 0.5 GB (the goal compares 5 GB with 0.5 GB)")

    training = {f"{s:g}GB": training_cpu(by[(s, high)]) for s in sizes if (s, high) in by}
    training = {k: None if v is None else round(v, 2) for k, v in training.items()}
    if any(v is not None for v in training.values()):
        found = sorted({name for r in results for name in (getattr(r.stage("tokenizer"), "parts", None) or {})
                        if name in TRAINING_PARTS})
        lines.append(f"tokenizer training CPU s ({' + '.join(found)}, {high} workers), by size: "
                     + ", ".join(f"{k} {v:,.1f}" if v is not None else f"{k} -" for k, v in training.items())
                     + "  (goal: flat above the sample bound)")
    else:
        lines.append("tokenizer training time: the tokenizer manifest has no training parts yet "
                     f"(looked for {', '.join(TRAINING_PARTS)})")

    rate = value if value is not None else cpu_per_gb(largest, low)
    marginal = marginal_cpu_per_gb([r for r in results if r.workers == (high if value is not None else low)])
    if marginal is not None:
        lines.append(f"marginal CPU-s per GB (the slope from {sizes[0]:g} to {largest:g} GB, without the fixed "
                     f"start-up cost): {marginal:,.0f}")
    headline_rate = marginal if marginal is not None and marginal > 0 else rate
    core_hours = headline_rate * HEADLINE_GB / 3600
    lines.append(f"headline recipe (recipes/norwegian_warm.yaml: ~{HEADLINE_GB:,.0f} GB of text) at this rate: "
                 f"{core_hours:,.0f} core-hours = {core_hours / HEADLINE_NODE_CORES:,.1f} hours on one "
                 f"{HEADLINE_NODE_CORES}-core node ({headline_rate:,.0f} CPU-s/GB, "
                 f"{'marginal' if headline_rate is marginal else f'average at {largest:g} GB'}; every core busy)")
    record = {"benchmark": "data_scale", "metric": "cpu_s_per_gb", "value": round(rate, 1),
              "baseline": None if baseline is None else round(baseline, 1),
              "ratio": None if baseline is None else round(rate / baseline, 3), "unit": "CPU-s/GB",
              "size_gb": largest, "workers": high if value is not None else low,
              "speedup": speedups, "rss_ratio": None if rss_ratio is None else round(rss_ratio, 3),
              "marginal_cpu_s_per_gb": None if marginal is None else round(marginal, 1),
              "tokenizer_training_cpu_s": training, "headline_core_hours": round(core_hours),
              "per_size": per_size}
    return lines, record


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------

def parse_workers(spec: str, usable: int) -> list[int]:
    """'1,all' -> [1, usable] (deduplicated, in order)."""
    out: list[int] = []
    for item in spec.split(","):
        n = usable if item.strip() == "all" else int(item)
        if n < 1:
            raise SystemExit(f"--workers: {item!r} is not a positive number nor 'all'")
        if n not in out:
            out.append(n)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes-gb", default="0.1,0.5,1,5", help="corpus sizes, GB of text (default 0.1,0.5,1,5)")
    parser.add_argument("--workers", default="1,all", help="worker counts; 'all' = every usable core (default 1,all)")
    parser.add_argument("--file-mb", type=float, default=128.0, help="MB of text per generated gzip file")
    parser.add_argument("--keep", type=Path, default=None,
                        help="work dir kept after the run (generated corpora are reused from it)")
    parser.add_argument("--keep-runs", action="store_true", help="keep each run's folder (to compare data/ outputs)")
    parser.add_argument("--smoke", action="store_true", help="a few MB with 1 and 2 workers: every code path, fast")
    args = parser.parse_args(argv)

    if not (CORPORA.is_dir() and BASE_MODEL.is_dir()):
        print(f"data_scale: skipped: needs ../shared (corpora and models/tiny-en-llama) at {SHARED}; not found")
        print(json.dumps({"benchmark": "data_scale", "metric": "cpu_s_per_gb", "value": None, "baseline": None,
                          "ratio": None, "unit": "CPU-s/GB", "skipped": "no ../shared"}))
        return 0
    usable = len(os.sched_getaffinity(0))
    if args.smoke:
        sizes, workers, file_mb = [0.002], [1, 2], 0.4
    else:
        sizes = sorted(float(s) for s in args.sizes_gb.split(","))
        workers, file_mb = parse_workers(args.workers, usable), args.file_mb

    work = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="data_scale-", dir="/tmp"))
    for sub in ("corpora", "recipes", "logs", "runs"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    print(f"data_scale: work dir {work}; {usable} usable cores; sizes {sizes} GB; workers {workers}", flush=True)
    results = []
    packs: dict[str, Pack] = {}
    try:
        for size in sizes:
            if not (work / "corpora" / corpus_tag(size) / "corpus.json").is_file() and not packs:
                packs = {lang: load_pack(lang) for lang, _ in LANGUAGES}
            corpus, meta = generate_corpus(size, work / "corpora", file_mb=file_mb, packs=packs)
            langs = ", ".join(f"{lang} {m['text_bytes'] / 1e6:,.1f} MB in {len(m['files'])} files, "
                              f"~{m['distinct_words']:,} distinct words"
                              for lang, m in meta["languages"].items())
            print(f"corpus {size:g} GB: {meta['text_bytes'] / 1e9:.3f} GB of text, {meta['docs']:,} documents, "
                  f"{meta['words']:,} words ({langs}; generated in {meta['seconds']} s)", flush=True)
            for n in workers:
                result = run_size(size, n, corpus, meta, work, args.keep_runs)
                print(f"  {n} worker(s): data {result.stages[0].usage.wall_s:.1f} s, tokenizer "
                      f"{result.stages[1].usage.wall_s:.1f} s wall; {result.cpu_s():.1f} CPU s", flush=True)
                results.append(result)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)

    print()
    print(render([row for r in results for row in table_rows(r)]))
    growth_rows = [[f"{r.text_gb:.3f}", str(r.workers), key, f"{value:,.0f}", per]
                   for r in results for key, value, per in growth(r)]
    print()
    if growth_rows:
        print(render(growth_rows, ["text GB", "workers", "what grows", "count", "rate"]))
    else:
        print("what grows: the manifests report no distinct/digest/unique/spill counts yet")
    lines, record = summarise(results, usable)
    print()
    print("\n".join(lines))
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
