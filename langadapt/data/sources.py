"""Reading one source's documents: local files (compressed or not) and Hugging Face datasets.

Files are read as bytes through `langadapt.inputs.text.iter_lines` (one reader: a bound on each document
enforced while decompressing, a truncated or corrupt .gz/.zst one located error) and decoded line
by line, so that invalid UTF-8 can be reported with the file and byte offset (of the decompressed
stream) and handled as the recipe says: stop, replace the bad bytes with U+FFFD, or skip the
document. Everything is streamed: a source's size never has to fit in memory, only its largest
document (a .json file holding one array is one document to the bound: `json` loads it whole).
"""

from __future__ import annotations

import glob
import itertools
import logging
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple

from langadapt.data.pieces import Piece
from langadapt.errors import LangadaptError
from langadapt.inputs.compression import compression_of, input_problem
from langadapt.inputs.files import DEFAULT_MAX_DOCUMENT_BYTES, open_input, parse_json
from langadapt.inputs.parquet_pages import column_pages
from langadapt.inputs.text import CHUNK_BYTES, Bound, Line, iter_lines
from langadapt.recipe.data import SourceConfig

if TYPE_CHECKING:
    import pyarrow.parquet as pq

log = logging.getLogger("langadapt.data")
DecodePolicy = Literal["error", "replace", "skip"]
_CUT = "the file's last line, with no newline at its end: is the file truncated?"
"""Said when a plain file's unterminated last line does not decode or parse: the one sign of a cut
a file without an end mark gives."""
_PARQUET_BATCH_ROWS = 1024
_TEXT_TYPES = {"string", "large_string", "binary", "large_binary", "string_view", "binary_view"}
_PARQUET_SLACK = 1 << 20
"""Bytes a Parquet column chunk holds besides its values (page headers, levels): the margin before
a row group's size alone proves one of its cells over the bound."""
ID_FIELD = "id"
"""The field (JSON key, `datasets` or Parquet column) holding a document's id, when it has one:
what `data.split_by: id` splits by."""
_EXTENSIONS = {
    ".txt": "txt", ".text": "txt", ".md": "txt", ".jsonl": "jsonl", ".ndjson": "jsonl",
    ".json": "json", ".parquet": "parquet",
}


def resolve_paths(source: SourceConfig, paths: str | list[str], what: str = "path") -> list[Path]:
    """Expand globs (relative to the working directory); error when nothing matches."""
    patterns = [paths] if isinstance(paths, str) else list(paths)
    if source.format == "hf_hub":
        return [Path(p) for p in patterns]  # hub ids, resolved by `datasets`
    found: list[Path] = []
    for pattern in patterns:
        matches = _matches(pattern)
        if not matches and what == "path" and source.fetch is not None and not glob.has_magic(pattern):
            matches = [str(_fetch(source, Path(pattern)))]
        if not matches:
            raise LangadaptError(f"source {source.name}: {what} {pattern!r} {why_unmatched(pattern)} "
                                 f"(cwd {Path.cwd()})")
        found.extend(Path(m) for m in matches)
    return found


def _matches(pattern: str) -> list[str]:
    if glob.has_magic(pattern):
        return sorted(glob.glob(pattern, recursive=True))
    return [pattern] if Path(pattern).exists() else []


def why_unmatched(pattern: str) -> str:
    """Why a path matches no file, said as the user can act on it: a symbolic link that leads
    nowhere (a loop, or a target that is gone) looks missing to `exists()` while `ls` shows it."""
    path = Path(pattern)
    if not glob.has_magic(pattern) and path.is_symlink():
        return (f"is a symbolic link that leads to no file (-> {os.readlink(path)}: a loop, "
                "or its target is gone)")
    return "matches no file"


def unmatched_patterns(source: SourceConfig) -> list[tuple[str, str]]:
    """(key, pattern) for each `path`/`valid_path` entry that matches nothing, without fetching.

    For the preflight check: a `path` that `fetch` will create is not missing, and hub ids are
    resolved by `datasets` (offline they cannot be checked)."""
    if source.format == "hf_hub":
        return []
    missing = []
    for key, paths in (("path", source.path), ("valid_path", source.valid_path)):
        patterns = [] if paths is None else [paths] if isinstance(paths, str) else list(paths)
        for pattern in patterns:
            fetchable = key == "path" and source.fetch is not None and not glob.has_magic(pattern)
            if not fetchable and not _matches(pattern):
                missing.append((key, pattern))
    return missing


def matched_inputs(source: SourceConfig) -> list[tuple[str, Path]]:
    """(key, file) for every file `path` / `valid_path` matches now, without fetching: what the
    preflight check inspects. Saved `datasets` folders and hub ids are read by `datasets` instead."""
    if source.format == "hf_hub":
        return []
    found = []
    for key, paths in (("path", source.path), ("valid_path", source.valid_path)):
        patterns = [] if paths is None else [paths] if isinstance(paths, str) else list(paths)
        for match in (Path(m) for pattern in patterns for m in _matches(pattern)):
            if source.format == "hf_disk" or (source.format == "auto" and _saved_dataset(match)):
                continue
            found.append((key, match))
    return found


def _saved_dataset(path: Path) -> bool:
    return path.is_dir() and ((path / "dataset_info.json").exists() or (path / "dataset_dict.json").exists())


def local_files(source: SourceConfig) -> list[Path] | None:
    """The plain files `path` names now; None when an entry matches nothing yet (to be fetched),
    the source is a dataset (sized only by reading it), or a file is no good as input
    (`input_problem`: the preflight check reports it; its size means nothing)."""
    if source.format in ("hf_disk", "hf_hub"):
        return None
    patterns = [source.path] if isinstance(source.path, str) else list(source.path)
    found = [Path(m) for pattern in patterns for m in _matches(pattern)]
    if any(not _matches(pattern) for pattern in patterns) or any(input_problem(p) for p in found):
        return None
    return found


def _fetch(source: SourceConfig, out_path: Path) -> Path:
    """Build the missing file from a Debian documentation package (imported lazily: needs apt)."""
    from langadapt.corpora.debian_docs import build_debian_corpus

    assert source.fetch is not None
    return build_debian_corpus(source.fetch.debian_package, source.fetch.locale, out_path)


class Document(NamedTuple):
    """One document as read: its raw text, and its `ID_FIELD` as text when its record has one
    (JSON, `datasets` and Parquet rows; .txt documents and rows without the field have none)."""

    text: str
    id: str | None = None


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
    file that is binary shows NUL bytes in its first block and is refused as such (`_open_checked`).
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
        yield from _iter_hf(source, path, fmt == "hf_disk", bound, piece.shard)
    elif fmt == "parquet":
        yield from _iter_parquet(source, path, bound, piece.row_groups)
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
        if _saved_dataset(path):
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
                yield _record(source, path, record, f"item {i}")
            return
        where = f"line {line.number}"
        yield _record(source, path, _parse(source, path, text, where, line), where)


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


def _record(source: SourceConfig, path: Path | str, record: object, where: str) -> Document:
    if not isinstance(record, dict):
        raise LangadaptError(f"source {source.name}: {where} of {path} is not a JSON object")
    if source.text_field not in record:
        keys = ", ".join(sorted(record)) or "none"
        raise LangadaptError(
            f"source {source.name}: field {source.text_field!r} not found at {where} of {path} "
            f"(keys: {keys}); set text_field"
        )
    value = record[source.text_field]
    if value is not None and not isinstance(value, str):
        raise LangadaptError(
            f"source {source.name}: field {source.text_field!r} at {where} of {path} is "
            f"{type(value).__name__}, not text"
        )
    return Document(value or "", _id_text(record.get(ID_FIELD)))


def _id_text(value: object) -> str | None:
    """A record's id as text (numbers too); None when it has none."""
    return None if value is None or value == "" else str(value)


def _iter_parquet(source: SourceConfig, path: Path, bound: Bound,
                  row_groups: tuple[int, int] | None = None) -> Iterator[Document]:
    """The text column of a Parquet file, in batches sized from the row groups' metadata.

    What one cell can cost: Arrow decompresses a whole page before any value is seen, and a page
    holds whole values, so the bound is kept on pages. A row group whose text column holds more
    bytes than its rows could at the bound is refused from the footer, and a page over
    `_page_limit` from its header (`inputs.parquet_pages`), both before any page is decompressed; so at
    most one page of 2 x the bound + 1 MiB is in memory, besides `CHUNK_BYTES` of compressed
    input (no pre-buffering of whole column chunks). A cell over the bound inside such a page is
    refused with its row from the batch's value lengths, in Arrow, before Python sees it.

    Page checksums are verified where the writer stored them; a file without them is said once
    (a flipped byte in it can read as other text)."""
    import pyarrow.parquet as pq

    key = f"source {source.name}"
    raw = open_input(path, key)
    try:
        if compression_of(raw.peek(4)[:4]) is not None:  # type: ignore[attr-defined]
            raise LangadaptError(f"{key}: {path} is a Parquet file compressed as a whole, which cannot be read "
                                 "without unpacking it (Parquet needs its footer first): unpack it; Parquet "
                                 "compresses its own pages (compression='zstd' when writing)")
        try:
            parquet = pq.ParquetFile(raw, page_checksum_verification=True, pre_buffer=False, buffer_size=CHUNK_BYTES)
        except Exception as err:  # pyarrow raises several unrelated types for a bad file
            raise LangadaptError(f"{key}: cannot read {path} as parquet: {err}") from None
        names = parquet.schema_arrow.names
        if source.text_field not in names:
            raise LangadaptError(
                f"{key}: field {source.text_field!r} not found in {path} "
                f"(columns: {', '.join(names)}); set text_field"
            )
        yield from _parquet_rows(parquet, raw.fileno(), source, path, bound, row_groups)
    finally:
        raw.close()


def _page_limit(bound: Bound) -> int:
    """Largest page decompressed: room for a cell just over the bound (named by its row, from the
    batch) beside a page's worth of small values; larger pages are refused from their header."""
    return 2 * bound.max_bytes + _PARQUET_SLACK


def _checked_pages(fd: int, chunk: object, path: Path, bound: Bound, key: str, group: int, rows: range) -> bool:
    """Refuse a page of the text column chunk `chunk` (row group `group`, rows `rows`) over the page
    limit, from its header; whether every page carries a checksum."""
    start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset  # type: ignore[attr-defined]
    where = f"{key}: cannot read {path} as parquet: row group {group}"
    pages = column_pages(fd, start, chunk.total_compressed_size, where)  # type: ignore[attr-defined]
    first = rows[0] if rows else 0
    for page in pages:
        if max(page.uncompressed, page.compressed) > _page_limit(bound):
            what = (f"one of rows {rows[0]}-{rows[-1]} (the row group's dictionary page)" if page.dictionary
                    else f"one of rows {first}-{first + max(page.rows, 1) - 1}")
            raise bound.refuse(key, what, path, f"a page at byte {page.offset} declares {page.uncompressed:,} bytes")
        first += page.rows
    return all(page.has_crc for page in pages)


def _parquet_rows(parquet: pq.ParquetFile, fd: int, source: SourceConfig, path: Path, bound: Bound,
                  row_groups: tuple[int, int] | None = None) -> Iterator[Document]:
    """The documents of an open ParquetFile (or of its row groups [first, stop)), row group by row
    group, each group's pages checked first; rows are numbered as in the whole file."""
    import pyarrow.compute as pc

    key = f"source {source.name}"
    names = parquet.schema_arrow.names  # type: ignore[attr-defined]
    column = parquet.schema_arrow.get_field_index(source.text_field)  # type: ignore[attr-defined]
    columns = [source.text_field] + ([ID_FIELD] if ID_FIELD in names and ID_FIELD != source.text_field else [])
    groups = range(*row_groups) if row_groups else range(parquet.num_row_groups)  # type: ignore[attr-defined]
    first_row = sum(parquet.metadata.row_group(g).num_rows for g in range(groups.start))  # type: ignore[attr-defined]
    unchecked = False
    for group in groups:
        meta = parquet.metadata.row_group(group)  # type: ignore[attr-defined]
        stored = meta.column(column).total_uncompressed_size
        rows = range(first_row, first_row + meta.num_rows)
        if stored > len(rows) * (bound.max_bytes + 8) + _PARQUET_SLACK:  # 4-byte lengths, levels, page headers
            what = f"row {rows[0]}" if len(rows) == 1 else f"one of rows {rows[0]}-{rows[-1]}"
            raise bound.refuse(key, what, path, f"row group {group} holds {stored:,} bytes of text in {len(rows)} row(s)")
        checksums = _checked_pages(fd, meta.column(column), path, bound, key, group, rows)
        if not checksums and not unchecked and groups.start == 0:  # said once, by the file's first piece
            unchecked = True
            log.warning("%s: %s carries no page checksums, so a corrupt byte in it can read as other text "
                        "unnoticed; write it with checksums (pyarrow: pq.write_table(..., "
                        "write_page_checksum=True))", key, path)
        batch_size = max(1, min(_PARQUET_BATCH_ROWS, CHUNK_BYTES * len(rows) // max(stored, 1)))
        try:
            for batch in parquet.iter_batches(batch_size=batch_size, row_groups=[group], columns=columns):  # type: ignore[attr-defined]
                values = batch.column(0)
                if str(values.type) in _TEXT_TYPES and len(values):
                    lengths = pc.binary_length(values)  # type: ignore[attr-defined]
                    longest = pc.max(lengths).as_py() or 0  # type: ignore[attr-defined]
                    if longest > bound.max_bytes:
                        row = first_row + pc.index(lengths, longest).as_py()  # type: ignore[attr-defined]
                        raise bound.refuse(key, f"row {row}", path, f"{longest:,} bytes in column {source.text_field!r}")
                ids = batch.column(1).to_pylist() if len(columns) > 1 else itertools.repeat(None)
                for value, doc_id in zip(values.to_pylist(), ids):
                    yield Document("" if value is None else str(value), _id_text(doc_id))
                first_row += len(batch)
        except (OSError, ValueError) as err:  # ArrowInvalid is a ValueError, ArrowIOError an OSError
            raise LangadaptError(f"{key}: cannot read {path} as parquet at row {first_row} (corrupt or "
                                 f"truncated?): {' '.join(str(err).split())}") from None


def _iter_hf(source: SourceConfig, path: Path | str, disk: bool, bound: Bound,
             shard: tuple[int, int] | None = None) -> Iterator[Document]:
    """A `datasets` dataset saved with save_to_disk, or a Hub dataset (id or local folder) streamed;
    with `shard` (index, count), only that contiguous shard of a saved one, rows numbered as in the whole.

    `datasets` holds a row before it is seen here: the bound keeps such a document out of the data
    stage's files (and so out of every later stage), not out of `datasets`' own memory."""
    import datasets

    try:
        if disk:
            dataset = datasets.load_from_disk(str(path))
            if isinstance(dataset, datasets.DatasetDict):
                if source.split not in dataset:
                    raise LangadaptError(f"source {source.name}: split {source.split!r} not in {path} "
                                         f"(splits: {', '.join(dataset)})")
                dataset = dataset[source.split]
        else:
            if not source.pinned:
                log.warning("source %s: %s is not pinned to a commit (revision: %s): a rerun may read other data",
                            source.name, path, source.revision or "none")
            dataset = datasets.load_dataset(str(path), name=source.subset, revision=source.revision,
                                            data_files=source.data_files, split=source.split,
                                            streaming=source.streaming)
    except LangadaptError:
        raise
    except Exception as err:  # datasets raises many types (FileNotFoundError, hub errors, ...)
        raise LangadaptError(f"source {source.name}: {_hub_error(source, path, err)}") from None
    first_row = 0
    if shard is not None and shard[1] > 1:
        index, count = shard
        first_row = sum(_shard_rows(len(dataset), count, i) for i in range(index))
        dataset = dataset.shard(num_shards=count, index=index, contiguous=True)
    columns = None if disk else dataset.column_names  # None also when a stream's schema is not known up front
    if columns is not None and source.text_field not in columns:
        raise LangadaptError(f"source {source.name}: text_field {source.text_field!r} is not a column of {path} "
                             f"(columns: {', '.join(columns)})")
    rows = iter(dataset)
    for i in itertools.count(first_row):
        try:
            record = next(rows)
        except StopIteration:
            return
        except Exception as err:  # a stream fails mid-way: a bad shard, a dropped connection
            raise LangadaptError(f"source {source.name}: reading row {i} of {path} failed: "
                                 f"{' '.join(str(err).split())}") from None
        doc = _record(source, path, record, f"row {i}")
        if bound.over(doc.text):
            raise bound.refuse(f"source {source.name}", f"row {i}", path, f"field {source.text_field!r}")
        yield doc


def _shard_rows(rows: int, count: int, index: int) -> int:
    """Rows in contiguous shard `index` of `count` (as `datasets.Dataset.shard(contiguous=True)` cuts)."""
    div, mod = divmod(rows, count)
    return div + (1 if index < mod else 0)


def _hub_error(source: SourceConfig, path: Path | str, err: Exception) -> str:
    """`datasets`' message on one line, blamed on the recipe key that caused it."""
    message = " ".join(str(err).split())
    if "BuilderConfig" in message or "Config name is missing" in message:
        listed = message.partition("Available: ")[2] or message.partition("among the available configs: ")[2]
        available = listed.split(" Example")[0].strip("[] ").replace("'", "")
        what = f"subset {source.subset!r} is not a config of" if source.subset else "set subset: a config of"
        return f"{what} {path} (available: {available})"
    if "Bad split" in message or "Unknown split" in message:
        return f"split {source.split!r} is not in {path} ({message})"
    if "Revision" in message or "revision" in message:
        return f"revision {source.revision!r} of {path}: {message}"
    return f"cannot load dataset {path}: {message}"
