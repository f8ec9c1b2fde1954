"""Reading one source's documents: local files (compressed or not) and Hugging Face datasets.

Files are read as bytes and decoded line by line, so that invalid UTF-8 can be reported with the
file and byte offset (of the decompressed stream) and handled as the recipe says: stop, replace
the bad bytes with U+FFFD, or skip the document. Everything is streamed: a source's size never
has to fit in memory (except a .json file holding one big array, which `json` must load whole).
"""

from __future__ import annotations

import codecs
import glob
import itertools
import json
import logging
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Literal

from langadapt.data.config import SourceConfig
from langadapt.errors import LangadaptError
from langadapt.ioerrors import decompressing, decompression_errors, input_problem, open_input

log = logging.getLogger("langadapt.data")
DecodePolicy = Literal["error", "replace", "skip"]
_SNIFF_BYTES = 8192
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
            raise LangadaptError(f"source {source.name}: {what} {pattern!r} matches nothing (cwd {Path.cwd()})")
        found.extend(Path(m) for m in matches)
    return found


def _matches(pattern: str) -> list[str]:
    if glob.has_magic(pattern):
        return sorted(glob.glob(pattern, recursive=True))
    return [pattern] if Path(pattern).exists() else []


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


def iter_texts(
    source: SourceConfig, paths: list[Path], on_decode_error: DecodePolicy, counts: Counter
) -> Iterator[str]:
    """Yield the raw texts of a source, at most `source.max_docs`; counts decode problems."""
    produced = 0
    for path in paths:
        for text in _iter_path(source, path, on_decode_error, counts):
            yield _without_nul(source, path, text, counts) if "\x00" in text else text
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


def _iter_path(source: SourceConfig, path: Path, policy: DecodePolicy, counts: Counter) -> Iterator[str]:
    fmt = _format_of(source, path)
    if fmt == "hf_disk":
        yield from _iter_hf(source, path, disk=True)
    elif fmt == "hf_hub":
        yield from _iter_hf(source, path, disk=False)
    elif fmt == "parquet":
        yield from _iter_parquet(source, path)
    else:
        with _open_checked(source, path) as stream:
            lines = _decoded_lines(source, path, stream, policy, counts)
            if fmt == "txt":
                yield from _txt_documents(lines, source.txt_unit)
            else:
                yield from _json_documents(source, path, lines)


def _format_of(source: SourceConfig, path: Path) -> str:
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


def _open_checked(source: SourceConfig, path: Path) -> IO[bytes]:
    """Open (decompressing by magic bytes) and refuse non-regular, binary or unreadable files up front."""
    raw = open_input(path, f"source {source.name}")
    try:
        stream = decompressing(raw)
        head = stream.peek(_SNIFF_BYTES)[:_SNIFF_BYTES] if hasattr(stream, "peek") else b""
    except decompression_errors() as err:
        raw.close()
        raise LangadaptError(f"source {source.name}: cannot read {path}: {_one_line(err)}") from None
    if b"\x00" in head:
        stream.close()
        raise LangadaptError(
            f"source {source.name}: {path} looks binary (NUL byte at offset {head.index(0)}), not text"
        )
    return stream


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def _decoded_lines(
    source: SourceConfig, path: Path, stream: IO[bytes], policy: DecodePolicy, counts: Counter
) -> Iterator[tuple[int, str | None]]:
    """(line number, text) per line; text is None for a line skipped for bad UTF-8.

    A UTF-8 byte order mark at the start of the file is dropped: editors on Windows write one,
    and it is no part of the first document (in JSON Lines it would make line 1 invalid JSON).
    A decompression error mid-file (a corrupt or truncated .gz/.zst) names the file and how
    much text came out before it."""
    offset = 0
    try:
        for number, raw in enumerate(stream, start=1):
            if number == 1 and raw.startswith(codecs.BOM_UTF8):
                raw, offset = raw[len(codecs.BOM_UTF8):], len(codecs.BOM_UTF8)
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as err:
                where = f"byte {offset + err.start} (line {number}) of {path}"
                if policy == "error":
                    raise LangadaptError(f"source {source.name}: invalid UTF-8 at {where}: {_decode_hint(raw, path)}") from None
                counts[f"decode_error_{'replaced' if policy == 'replace' else 'skipped'}"] += 1
                yield number, raw.decode("utf-8", errors="replace") if policy == "replace" else None
            offset += len(raw)
    except decompression_errors() as err:
        raise LangadaptError(f"source {source.name}: cannot read {path} at byte {offset} of its text "
                             f"(corrupt or truncated?): {_one_line(err)}") from None


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


def _txt_documents(lines: Iterable[tuple[int, str | None]], unit: str) -> Iterator[str]:
    """Group lines into documents; a document with a skipped (undecodable) line is dropped."""
    block: list[str] = []
    bad = False
    for _, line in lines:
        if line is None:
            bad = True
            continue
        if unit == "line":
            if not bad and line.strip():
                yield line.rstrip("\r\n")
            bad = False
        elif unit == "paragraph" and not line.strip():
            if block and not bad:
                yield "".join(block)
            block, bad = [], False
        else:
            block.append(line)
    if block and not bad:
        yield "".join(block)


def _json_documents(source: SourceConfig, path: Path, lines: Iterator[tuple[int, str | None]]) -> Iterator[str]:
    """JSON Lines, or a .json file holding one array of objects."""
    for number, line in lines:
        if line is None or not line.strip():
            continue
        if number == 1 and line.lstrip().startswith("["):
            rest = line + "".join(text or "" for _, text in lines)
            records = _parse(source, path, rest, "the array")
            for i, record in enumerate(records):
                yield _field(source, path, record, f"item {i}")
            return
        yield _field(source, path, _parse(source, path, line, f"line {number}"), f"line {number}")


def _parse(source: SourceConfig, path: Path, text: str, where: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise LangadaptError(f"source {source.name}: invalid JSON at {where} of {path}: {err.msg}") from None


def _field(source: SourceConfig, path: Path | str, record: object, where: str) -> str:
    if not isinstance(record, dict):
        raise LangadaptError(f"source {source.name}: {where} of {path} is not a JSON object")
    if source.text_field not in record:
        keys = ", ".join(sorted(record)) or "none"
        raise LangadaptError(
            f"source {source.name}: field {source.text_field!r} not found at {where} of {path} "
            f"(keys: {keys}); set text_field"
        )
    value = record[source.text_field]
    if value is None:
        return ""
    if not isinstance(value, str):
        raise LangadaptError(
            f"source {source.name}: field {source.text_field!r} at {where} of {path} is "
            f"{type(value).__name__}, not text"
        )
    return value


def _iter_parquet(source: SourceConfig, path: Path) -> Iterator[str]:
    import pyarrow.parquet as pq

    raw = open_input(path, f"source {source.name}")
    try:
        parquet = pq.ParquetFile(raw)
    except Exception as err:  # pyarrow raises several unrelated types for a bad file
        raw.close()
        raise LangadaptError(f"source {source.name}: cannot read {path} as parquet: {err}") from None
    names = parquet.schema_arrow.names
    if source.text_field not in names:
        raise LangadaptError(
            f"source {source.name}: field {source.text_field!r} not found in {path} "
            f"(columns: {', '.join(names)}); set text_field"
        )
    for batch in parquet.iter_batches(columns=[source.text_field], batch_size=1024):
        for value in batch.column(0).to_pylist():
            yield "" if value is None else str(value)


def _iter_hf(source: SourceConfig, path: Path | str, disk: bool) -> Iterator[str]:
    """A `datasets` dataset saved with save_to_disk, or a Hub dataset (id or local folder) streamed."""
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
    columns = None if disk else dataset.column_names  # None also when a stream's schema is not known up front
    if columns is not None and source.text_field not in columns:
        raise LangadaptError(f"source {source.name}: text_field {source.text_field!r} is not a column of {path} "
                             f"(columns: {', '.join(columns)})")
    rows = iter(dataset)
    for i in itertools.count():
        try:
            record = next(rows)
        except StopIteration:
            return
        except Exception as err:  # a stream fails mid-way: a bad shard, a dropped connection
            raise LangadaptError(f"source {source.name}: reading row {i} of {path} failed: "
                                 f"{' '.join(str(err).split())}") from None
        yield _field(source, path, record, f"row {i}")


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
