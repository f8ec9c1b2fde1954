"""Reading one source's documents: the reader each format calls for, and the line-based formats.

Parquet files are `parquet_reader`'s, `datasets` folders and Hub datasets `hf_reader`'s, and which
files a source names is `source_paths`'. Text, JSON Lines and .json files are read here, as bytes
through `langadapt.inputs.text.iter_lines` (one reader: a bound on each document
enforced while decompressing, a truncated or corrupt .gz/.zst one located error) and decoded line
by line, so that invalid UTF-8 can be reported with the file and byte offset (of the decompressed
stream) and handled as the recipe says: stop, replace the bad bytes with U+FFFD, or skip the
document. Everything is streamed: a source's size never has to fit in memory, only its largest
document (a .json file holding one array is one document to the bound: `json` loads it whole).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Literal

from langadapt.data.hf_reader import iter_hf
from langadapt.data.parquet_reader import iter_parquet
from langadapt.data.pieces import Piece
from langadapt.data.records import Document, record_document
from langadapt.data.source_paths import saved_dataset
from langadapt.errors import LangadaptError
from langadapt.inputs.files import DEFAULT_MAX_DOCUMENT_BYTES, parse_json
from langadapt.inputs.text import Bound, Line, iter_lines
from langadapt.recipe.data import SourceConfig

log = logging.getLogger("langadapt.data")
DecodePolicy = Literal["error", "replace", "skip"]
_CUT = "the file's last line, with no newline at its end: is the file truncated?"
"""Said when a plain file's unterminated last line does not decode or parse: the one sign of a cut
a file without an end mark gives."""

_EXTENSIONS = {
    ".txt": "txt", ".text": "txt", ".md": "txt", ".jsonl": "jsonl", ".ndjson": "jsonl",
    ".json": "json", ".parquet": "parquet",
}


def iter_texts(
    source: SourceConfig, paths: list[Path], on_decode_error: DecodePolicy, counts: Counter,
    max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
) -> Iterator[str]:
    """Yield the raw texts of a source (`iter_documents` without the ids)."""
    for doc in iter_documents(source, paths, on_decode_error, counts, max_document_bytes):
        yield doc.text


def iter_documents(
    source: SourceConfig, paths: list[Path], on_decode_error: DecodePolicy, counts: Counter,
    max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
) -> Iterator[Document]:
    """Yield the raw documents of a source, at most `source.max_docs`; counts decode problems.

    No document longer than `max_document_bytes` (UTF-8, before cleaning) is ever held: a longer
    line, paragraph, file or Parquet cell is refused while it is read (`langadapt.inputs.text`)."""
    bound = Bound(max_document_bytes)
    produced = 0
    for path in paths:
        for doc in _iter_path(source, path, on_decode_error, counts, bound):
            yield doc._replace(text=_without_nul(source, path, doc.text, counts)) if "\x00" in doc.text else doc
            produced += 1
            if source.max_docs is not None and produced >= source.max_docs:
                return


def _without_nul(source: SourceConfig, path: Path, text: str, counts: Counter) -> str:
    """The text with its NUL characters removed; the first such document of a source is logged.

    Stripped, not refused: NUL is no character of any language, so removing it loses nothing,
    while C-string code below the tokenizer libraries may end a string at it. A stray escaped
    `\\u0000` in a crawled JSONL file (common in web dumps) must not stop a run over terabytes; a
    file that is binary shows NUL bytes in its first block and is refused as such
    (`inputs.text.open_text`).
    """
    counts["nul_stripped"] += 1
    if counts["nul_stripped"] == 1:
        log.warning("source %s: NUL characters removed from documents (first in %s); "
                    "counted as nul_stripped in the data summary", source.name, path)
    return text.replace("\x00", "")


def _iter_path(
    source: SourceConfig, path: Path, policy: DecodePolicy, counts: Counter, bound: Bound
) -> Iterator[Document]:
    return read_piece(source, Piece(path), policy, counts, bound)


def read_piece(
    source: SourceConfig, piece: Piece, policy: DecodePolicy, counts: Counter, bound: Bound
) -> Iterator[Document]:
    """The raw documents of one piece of a source (`data.pieces`), in file order; NUL characters
    and `max_docs` are the caller's (`iter_documents`, or the data stage's parent)."""
    path = piece.path
    fmt = format_of(source, path)
    if fmt in ("hf_disk", "hf_hub"):
        yield from iter_hf(source, path, fmt == "hf_disk", bound, piece.shard)
    elif fmt == "parquet":
        yield from iter_parquet(source, path, bound, piece.row_groups)
    else:
        lines = iter_lines(path, f"source {source.name}", bound, piece.span)
        lines = _decoded_lines(source, path, lines, policy, counts)
        if fmt == "txt":
            yield from map(Document, _txt_documents(source, path, lines, bound))
        else:
            yield from _json_documents(source, path, lines, bound)


def format_of(source: SourceConfig, path: Path) -> str:
    if source.format != "auto":
        return source.format
    if path.is_dir():
        if saved_dataset(path):
            return "hf_disk"
        raise LangadaptError(f"source {source.name}: {path} is a folder, not a saved dataset: use a glob")
    suffixes = [s.lower() for s in path.suffixes if s.lower() not in (".gz", ".zst", ".zstd")]
    fmt = _EXTENSIONS.get(suffixes[-1] if suffixes else "")
    if fmt is None:
        raise LangadaptError(f"source {source.name}: cannot tell the format of {path}: set its format")
    return fmt


def _decoded_lines(
    source: SourceConfig, path: Path, lines: Iterator[Line], policy: DecodePolicy, counts: Counter
) -> Iterator[tuple[Line, str | None]]:
    """Each line with its text; the text is None for a line skipped for bad UTF-8."""
    for line in lines:
        try:
            yield line, line.raw.decode("utf-8")
        except UnicodeDecodeError as err:
            where = f"byte {line.offset + err.start} (line {line.number}) of {path}"
            if policy == "error":
                hint = (_CUT if err.reason == "unexpected end of data" and not line.raw.endswith(b"\n")
                        else _decode_hint(line.raw, path))
                raise LangadaptError(f"source {source.name}: invalid UTF-8 at {where}: {hint}") from None
            counts[f"decode_error_{'replaced' if policy == 'replace' else 'skipped'}"] += 1
            yield line, line.raw.decode("utf-8", errors="replace") if policy == "replace" else None


def _decode_hint(raw: bytes, path: Path) -> str:
    """What to do about bytes that are not UTF-8. Converting the file keeps every document;
    `skip` drops each document with one bad byte (most of a Latin-1 file: every ø and å)."""
    encoding = _legacy_encoding(raw)
    out = path.with_name(path.name.split(".")[0] + ".utf8" + "".join(path.suffixes))
    convert = f"iconv -f {encoding} -t utf-8 {path} > {out}"
    if path.suffix in (".gz", ".zst", ".zstd"):
        unpack, pack = ("zcat", "gzip") if path.suffix == ".gz" else ("zstdcat", "zstd")
        convert = f"{unpack} {path} | iconv -f {encoding} -t utf-8 | {pack} > {out}"
    return (f"convert the file to UTF-8 ({convert}), or set data.on_decode_error: replace "
            "(bad bytes become U+FFFD); skip drops every document with a bad byte")


def _legacy_encoding(raw: bytes) -> str:
    """cp1252 when the line decodes as Windows' superset of Latin-1, else latin1 (never fails)."""
    try:
        raw.decode("cp1252")
        return "cp1252"
    except UnicodeDecodeError:
        return "latin1"


def _txt_documents(
    source: SourceConfig, path: Path, lines: Iterable[tuple[Line, str | None]], bound: Bound
) -> Iterator[str]:
    """Group lines into documents; a document with a skipped (undecodable) line is dropped. A
    paragraph or file longer than the bound is refused when it passes it (each line is bounded
    already by the reader)."""
    unit = source.txt_unit
    block: list[str] = []
    block_bytes, bad = 0, False
    for line, text in lines:
        if text is None:
            bad = True
            continue
        if unit == "line":
            if not bad and text.strip():
                yield text.rstrip("\r\n")
            bad = False
        elif unit == "paragraph" and not text.strip():
            if block and not bad:
                yield "".join(block)
            block, block_bytes, bad = [], 0, False
        else:
            block_bytes += len(line.raw)
            if block_bytes > bound.max_bytes:
                what = "the file" if unit == "file" else "the paragraph"
                raise bound.refuse(f"source {source.name}", f"{what} ending at line {line.number}", path,
                                   f"over {block_bytes:,} bytes at byte {line.offset}")
            block.append(text)
    if block and not bad:
        yield "".join(block)


def _json_documents(
    source: SourceConfig, path: Path, lines: Iterator[tuple[Line, str | None]], bound: Bound
) -> Iterator[Document]:
    """JSON Lines, or a .json file holding one array of objects (read whole: bounded as one document)."""
    for line, text in lines:
        if text is None or not text.strip():
            continue
        if line.number == 1 and text.lstrip().startswith("["):
            whole, last = _whole_array(source, path, line, text, lines, bound)
            records = _parse(source, path, whole, "the array", last)
            for i, record in enumerate(records):
                yield record_document(source, path, record, f"item {i}")
            return
        where = f"line {line.number}"
        yield record_document(source, path, _parse(source, path, text, where, line), where)


def _whole_array(
    source: SourceConfig, path: Path, first: Line, text: str, lines: Iterator[tuple[Line, str | None]], bound: Bound
) -> tuple[str, Line]:
    """The text of a .json array file: `json` parses it in one piece, so the whole file is one
    document to the bound (JSON Lines streams any size: `jq -c '.[]' in.json > out.jsonl`)."""
    parts, total, last = [text], len(first.raw), first
    for last, more in lines:
        total += len(last.raw)
        if total > bound.max_bytes:
            raise bound.refuse(f"source {source.name}", "the JSON array", path,
                               f"read whole; convert it to JSON Lines: jq -c '.[]' {path}")
        parts.append(more or "")
    return "".join(parts), last


def _parse(source: SourceConfig, path: Path, text: str, where: str, line: Line) -> object:
    cut = "" if line.raw.endswith(b"\n") else f" ({_CUT})"
    return parse_json(text, f"source {source.name}: invalid JSON at {where} of {path}", cut)
