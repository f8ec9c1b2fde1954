"""Reading a Parquet source: its text column (and ids), with the bound on a document kept on pages.

A module of its own because Parquet is not read by lines: Arrow decompresses whole pages of a
column, so a document's bound is checked from the footer and the page headers before any page is
decompressed (`iter_parquet` says how), which no other format needs.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from langadapt.data.records import ID_FIELD, Document, id_text
from langadapt.errors import LangadaptError
from langadapt.inputs.compression import compression_of
from langadapt.inputs.files import open_input
from langadapt.inputs.parquet_pages import column_pages
from langadapt.inputs.text import CHUNK_BYTES, Bound
from langadapt.recipe.data import SourceConfig

if TYPE_CHECKING:
    import pyarrow.parquet as pq

log = logging.getLogger("langadapt.data")
_PARQUET_BATCH_ROWS = 1024
_TEXT_TYPES = {"string", "large_string", "binary", "large_binary", "string_view", "binary_view"}
_PARQUET_SLACK = 1 << 20
"""Bytes a Parquet column chunk holds besides its values (page headers, levels): the margin before
a row group's size alone proves one of its cells over the bound."""


def iter_parquet(source: SourceConfig, path: Path, bound: Bound,
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
                    yield Document("" if value is None else str(value), id_text(doc_id))
                first_row += len(batch)
        except (OSError, ValueError) as err:  # ArrowInvalid is a ValueError, ArrowIOError an OSError
            raise LangadaptError(f"{key}: cannot read {path} as parquet at row {first_row} (corrupt or "
                                 f"truncated?): {' '.join(str(err).split())}") from None
