"""Reading evaluation data (held-out texts, minimal pairs, parallel rows), with file:line errors.

Kept free of torch so the preflight check reads a suite's files before any stage runs, in well
under a second, and the evaluation reads them once before the first model loads.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from langadapt.errors import LangadaptError
from langadapt.inputs.compression import decompression_errors
from langadapt.inputs.files import parse_json
from langadapt.inputs.text import FIXED_BOUND, iter_lines, read_input_text


def read_texts(paths: list[str]) -> list[str]:
    """Documents from local files: JSONL (optionally .gz) with a `text` key, else one file = one document."""
    texts: list[str] = []
    for path in map(Path, paths):
        if path.name.endswith((".jsonl", ".jsonl.gz")):
            texts += [row["text"] for _, row in _jsonl_rows(path, required=("text",))]
        else:
            texts.append(read_input_text(path, "evaluation data", FIXED_BOUND.max_bytes, decompress=True))
    return texts


def _jsonl_rows(path: Path, required: tuple[str, ...]):
    """Yield (line number, object) for each non-blank line; a bad line raises with file:line.

    Read by the one bounded line reader (`langadapt.inputs.text.iter_lines`: a FIFO refused, decompressed by its
    magic bytes, a UTF-8 BOM dropped, a line over the bound or a truncated .gz/.zst one line naming
    the file)."""
    try:
        yield from _rows(path, required)
    except decompression_errors() as exc:
        raise LangadaptError(f"{path}: cannot read: {' '.join(str(exc).split()) or type(exc).__name__}") from None
    except UnicodeDecodeError as exc:
        raise LangadaptError(f"{path}: invalid UTF-8 ({exc.reason})") from None


def _rows(path: Path, required: tuple[str, ...]):
    for number, _, raw in iter_lines(path, "evaluation data", FIXED_BOUND):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:  # Latin-1 and other 8-bit files: say where, as a data file's errors do
            raise LangadaptError(f"{path}:{number}: invalid UTF-8 at byte {exc.start} of the line "
                                 f"({raw[exc.start:exc.start + 1]!r}); save the file as UTF-8") from None
        if not line.strip():
            continue
        row = parse_json(line, f"{path}:{number}: malformed JSON")
        missing = [k for k in required if not isinstance(row, dict) or not isinstance(row.get(k), str)]
        if missing:
            raise LangadaptError(
                f"{path}:{number}: expected an object with string key(s) {', '.join(missing)}"
            )
        yield number, row


def cap_bytes(texts: list[str], max_bytes: int | None) -> list[str]:
    """The leading documents up to `max_bytes` UTF-8 bytes; the last one is cut on a character boundary."""
    if max_bytes is None:
        return list(texts)
    kept: list[str] = []
    left = max_bytes
    for text in texts:
        data = text.encode("utf-8")
        if len(data) >= left:
            cut = data[:left].decode("utf-8", errors="ignore")
            if cut:
                kept.append(cut)
            break
        kept.append(text)
        left -= len(data)
    return kept


def read_minimal_pairs(path: str | Path) -> list[tuple[str, str]]:
    """(good, bad) pairs from a JSONL file; a malformed line raises naming file:line."""
    pairs = [(row["good"], row["bad"]) for _, row in _jsonl_rows(Path(path), required=("good", "bad"))]
    if not pairs:
        raise LangadaptError(f"{path}: no minimal pairs in file")
    return pairs


MAX_TRANSLATION_CHARS = 20_000
"""The longest side of a translation row: sentences and paragraphs are what the task scores (WMT's
are under 1,000 characters); a longer one would fill the prompt past a small model's context and be
cut without a word, so it is refused naming its line."""


def read_parallel(path: str | Path, langs: list[str]) -> list[dict[str, str]]:
    """Parallel rows ({lang: text} for `langs`; other keys ignored) from a JSONL file; a line
    without a non-empty string for every language, or with one over MAX_TRANSLATION_CHARS, raises
    naming file:line."""
    rows = []
    for number, row in _jsonl_rows(Path(path), required=tuple(langs)):
        for lang in langs:
            if not row[lang].strip():
                raise LangadaptError(f"{path}:{number}: {lang} is empty; every row needs a text in each language")
            if len(row[lang]) > MAX_TRANSLATION_CHARS:
                raise LangadaptError(f"{path}:{number}: {lang} is {len(row[lang]):,} characters, over the "
                                     f"{MAX_TRANSLATION_CHARS:,} a translation row may have (a sentence or a paragraph)")
        rows.append({lang: row[lang] for lang in langs})
    if not rows:
        raise LangadaptError(f"{path}: no parallel rows in file")
    return rows


def read_translation(path: str | Path, langs: list[str], num_fewshot: int, where: str) -> list[dict[str, str]]:
    """A translation task's rows, checked when the suite is read (preflight, and planning the evaluate
    stage, before any model loads): sacrebleu installed, every row whole, more rows than examples."""
    if importlib.util.find_spec("sacrebleu") is None:
        raise LangadaptError(f"{where}: the translation task needs sacrebleu; run: pip install sacrebleu")
    rows = read_parallel(path, langs)
    if len(rows) <= num_fewshot:
        raise LangadaptError(f"{where}: {path} has {len(rows)} pair(s), none left to score after num_fewshot={num_fewshot}")
    return rows
