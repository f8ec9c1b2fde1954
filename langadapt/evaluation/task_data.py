"""Reading evaluation data (held-out texts, minimal pairs, parallel rows), with file:line errors.

Kept free of torch so the preflight check reads a suite's files before any stage runs, in well
under a second, and the evaluation reads them once before the first model loads.
"""

from __future__ import annotations

from pathlib import Path

from langadapt.data.bounded import FIXED_BOUND, iter_lines, read_whole_text
from langadapt.errors import LangadaptError
from langadapt.ioerrors import decompression_errors, parse_json


def read_texts(paths: list[str]) -> list[str]:
    """Documents from local files: JSONL (optionally .gz) with a `text` key, else one file = one document."""
    texts: list[str] = []
    for path in map(Path, paths):
        if path.name.endswith((".jsonl", ".jsonl.gz")):
            texts += [row["text"] for _, row in _jsonl_rows(path, required=("text",))]
        else:
            texts.append(read_whole_text(path, "evaluation data", FIXED_BOUND))
    return texts


def _jsonl_rows(path: Path, required: tuple[str, ...]):
    """Yield (line number, object) for each non-blank line; a bad line raises with file:line.

    Read by the one bounded reader (`langadapt.data.bounded`: a FIFO refused, decompressed by its
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
        line = raw.decode("utf-8")
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


def read_parallel(path: str | Path, langs: list[str]) -> list[dict[str, str]]:
    """Parallel rows ({lang: text} for `langs`; other keys ignored) from a JSONL file; a line
    without a string for every language raises naming file:line."""
    rows = [{lang: row[lang] for lang in langs} for _, row in _jsonl_rows(Path(path), required=tuple(langs))]
    if not rows:
        raise LangadaptError(f"{path}: no parallel rows in file")
    return rows
