"""The page headers of one Parquet column chunk, read before Arrow decompresses any page.

Why: Arrow decompresses a whole page before a reader sees a value, and a page holds whole values,
so a single cell is as large as its page (up to 2 GiB, the format's int32 page size). The footer
only says how large a row group's column is; with many rows a 2 GiB cell hides in it. The page
headers say each page's size and rows before its bytes are touched, so
`data.parquet_reader.iter_parquet` can refuse a page over the document bound from its header alone.
They also say whether the writer stored page checksums (`crc`), which `page_checksum_verification`
can only verify when they are there.

pyarrow exposes neither (the page index, when written at all, has no uncompressed sizes), so the
few fields needed are read here from the Thrift compact encoding of `PageHeader` (parquet.thrift:
1 type, 2 uncompressed_page_size, 3 compressed_page_size, 4 crc, 5 data_page_header with
num_values, 7 dictionary_page_header, 8 data_page_header_v2 with num_rows); every other field is
skipped by its wire type.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from langadapt.errors import LangadaptError

HEADER_PROBE_BYTES = 4096
"""Bytes read for one page header at first (headers are tens of bytes; statistics can add more)."""
MAX_HEADER_BYTES = 16 << 20
"""Arrow's own limit on one page header (`kDefaultMaxPageHeaderSize`): longer is corrupt."""
_DICTIONARY_PAGE = 2
_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(13)


@dataclass(frozen=True)
class Page:
    """One page of a column chunk as its header declares it."""

    offset: int
    """Byte offset of the page header in the file."""
    uncompressed: int
    compressed: int
    rows: int
    """Rows (values, for the flat text column) the page holds; 0 for a dictionary page."""
    dictionary: bool
    has_crc: bool


class _Short(Exception):
    """The header runs past the bytes read so far (read more, or it is corrupt)."""


class _Compact:
    """A reader of the Thrift compact protocol over one buffer (only what a PageHeader needs)."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise _Short
        self.pos += 1
        return self.data[self.pos - 1]

    def varint(self) -> int:
        value = shift = 0
        while True:
            b = self.byte()
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise ValueError("varint longer than 64 bits")

    def zigzag(self) -> int:
        value = self.varint()
        return (value >> 1) ^ -(value & 1)

    def field(self, last: int) -> tuple[int, int]:
        """(field id, wire type) of the next field of a struct; type _STOP at its end."""
        head = self.byte()
        kind = head & 0x0F
        if kind == _STOP:
            return 0, _STOP
        return (last + (head >> 4) if head >> 4 else self.zigzag()), kind

    def skip(self, kind: int) -> None:
        if kind in (_TRUE, _FALSE):
            return
        if kind == _BYTE:
            self.byte()
        elif kind in (_I16, _I32, _I64):
            self.varint()
        elif kind == _DOUBLE:
            self._advance(8)
        elif kind == _BINARY:
            self._advance(self.varint())
        elif kind in (_LIST, _SET):
            head = self.byte()
            size = head >> 4 if head >> 4 != 15 else self.varint()
            for _ in range(size):
                self.skip(head & 0x0F if head & 0x0F not in (_TRUE, _FALSE) else _BYTE)
        elif kind == _MAP:
            size = self.varint()
            types = self.byte() if size else 0
            for _ in range(size):
                self.skip(types >> 4)
                self.skip(types & 0x0F)
        elif kind == _STRUCT:
            self.struct({})
        else:
            raise ValueError(f"unknown Thrift type {kind}")

    def _advance(self, count: int) -> None:
        if self.pos + count > len(self.data):
            raise _Short
        self.pos += count

    def struct(self, wanted: dict[int, dict]) -> dict[int, object]:
        """The i32 fields of a struct by id; a field listed in `wanted` is read as a nested struct
        (with `wanted[id]` naming its own wanted fields), everything else skipped."""
        values: dict[int, object] = {}
        last = 0
        while True:
            last, kind = self.field(last)
            if kind == _STOP:
                return values
            if kind == _I32:
                values[last] = self.zigzag()
            elif kind == _STRUCT and last in wanted:
                values[last] = self.struct(wanted[last])
            else:
                self.skip(kind)


_WANTED = {5: {}, 8: {}}
"""PageHeader's data_page_header (5: field 1 num_values) and data_page_header_v2 (8: 3 num_rows)."""


def _header(fd: int, offset: int) -> tuple[dict[int, object], int]:
    """The PageHeader at `offset` (its i32 fields and wanted sub-structs) and its length in bytes."""
    size = HEADER_PROBE_BYTES
    while True:
        data = os.pread(fd, size, offset)
        reader = _Compact(data)
        try:
            return reader.struct(_WANTED), reader.pos
        except _Short:
            if len(data) < size or size >= MAX_HEADER_BYTES:
                raise ValueError(f"page header at byte {offset} runs past "
                                 f"{'the end of the file' if len(data) < size else 'the 16 MiB a header may have'}")
            size *= 16


def column_pages(fd: int, start: int, length: int, where: str) -> list[Page]:
    """The pages of the column chunk at bytes `start`..`start + length` of the open file `fd`.

    Positional reads (`pread`) leave the file position to Arrow. A header that does not decode,
    or a page running past the chunk, is one LangadaptError starting with `where` (the file and
    row group)."""
    pages, position, end = [], start, start + length
    try:
        while position < end:
            fields, header_bytes = _header(fd, position)
            kind, uncompressed, compressed = (int(fields.get(i, -1)) for i in (1, 2, 3))  # type: ignore[call-overload]
            if min(uncompressed, compressed) < 0:
                raise ValueError(f"page header at byte {position} has no page sizes")
            v1, v2 = fields.get(5, {}), fields.get(8, {})
            rows = v2.get(3, 0) if v2 else v1.get(1, 0)  # type: ignore[union-attr]
            pages.append(Page(position, uncompressed, compressed, int(rows), kind == _DICTIONARY_PAGE, 4 in fields))
            position += header_bytes + compressed
        if position > end:
            raise ValueError(f"the last page ends at byte {position}, past the column chunk's end at {end}")
    except ValueError as err:
        raise LangadaptError(f"{where}: {err} (corrupt or truncated?)") from None
    return pages
