"""The one reader of a user's text: line by line, each line bounded (`iter_lines`), or a file read
whole (`read_input_text`); either way complete or an error, and a BOM handled the same.

Every file of text a user gives (corpus sources, evaluation texts and minimal pairs, a model's
config.json, a bilingual dictionary) and every document file the data stage writes is read here,
so these promises hold by design, not by each caller remembering them:

- Memory is bounded. A line reader reads the decompressed text in chunks of `CHUNK_BYTES` and
  refuses a line as soon as the unfinished line passes its bound, never after reading it whole: a
  one-line `.zst` that expands to gigabytes costs the bound plus a chunk, not the gigabytes (a
  bare `for line in stream` or `readline()` reads the whole line first). A file read whole is
  refused from its size before a byte is read (plain), or when its text passes the bound
  (decompressed).
- A file that ends early is an error, not a shorter corpus. gzip has an end-of-stream marker and
  a CRC32 (Python's `gzip` raises EOFError or BadGzipFile: turned into one located line here);
  zstd frames are walked first (`compression.check_zstd_frames`), since zstd's stream reader
  returns quietly at the end of a cut frame.
- A UTF-8 BOM at the start (Windows editors write one) is no part of the text and is dropped, but
  byte offsets in error lines count it, on every path: `Line.offset`, and the offset of invalid
  UTF-8 in a file read whole, are offsets into the file's (decompressed) bytes, as an editor or
  `head -c` counts them.

Plain files carry no end mark: one cut at a line end cannot be told from a complete one (one cut
mid-line shows as a last line with no newline, which the callers name when it does not parse).
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NamedTuple

from langadapt.errors import LangadaptError
from langadapt.inputs.compression import (
    COMPRESSED_SUFFIXES,
    check_zstd_frames,
    compression_of,
    decompression_errors,
    decompressor,
)
from langadapt.inputs.files import (
    DEFAULT_MAX_DOCUMENT_BYTES,
    MAX_DOCUMENT_BYTES_CEILING,
    MIB,
    open_input,
    parse_json,
    read_input_bytes,
)

WRITTEN_LINE_BYTES = 6 * MAX_DOCUMENT_BYTES_CEILING + MIB
"""Longest line of a file the data stage writes: a document within the ceiling, JSON-escaped (a
control character takes at most 6 bytes as `\\u0001`), plus its other fields."""
CHUNK_BYTES = MIB
"""Decompressed bytes read at a time: what a line costs beyond the bound while it is refused."""
_SNIFF_BYTES = 8192


class Span(NamedTuple):
    """A run of whole lines of a plain (uncompressed) file: bytes [start, stop), whose first line is
    line `first_line` of the file. What one data-stage worker reads of a big file (`data.pieces`)."""

    start: int
    stop: int
    first_line: int


class Line(NamedTuple):
    """One line of a file's text: 1-based number, byte offset of its start in the (decompressed)
    text, and its bytes with the newline when it has one (a last line without one is unterminated)."""

    number: int
    offset: int
    raw: bytes


@dataclass(frozen=True)
class Bound:
    """A bound on one line or document, with the setting that raises it (said in the refusal;
    None for a reader no recipe setting reaches)."""

    max_bytes: int
    setting: str | None = "data.max_document_bytes"

    def over(self, text: str) -> bool:
        """Whether a text already in memory (a `datasets` row) is over the bound in UTF-8 bytes
        (encoded only when its length in characters leaves it in doubt)."""
        return len(text) * 4 > self.max_bytes and len(text.encode("utf-8")) > self.max_bytes

    def refuse(self, key: str, what: str, path: Path | str, at: str) -> LangadaptError:
        """The error for `what` (e.g. "line 3") of `path` being over the bound."""
        raise_it = (f" ({self.setting}); split the document, or raise {self.setting} (at most "
                    f"{_size(MAX_DOCUMENT_BYTES_CEILING)}) if it is meant to be one document" if self.setting
                    else "; split the document")
        return LangadaptError(
            f"{key}: {what} of {path} ({at}) is longer than {_size(self.max_bytes)}, the bound on one document{raise_it}"
        )


FIXED_BOUND = Bound(DEFAULT_MAX_DOCUMENT_BYTES, setting=None)
"""The bound of readers that no recipe setting reaches (evaluation texts and minimal pairs)."""


def _size(num_bytes: int) -> str:
    return f"{num_bytes / MIB:g} MiB" if num_bytes >= MIB else f"{num_bytes:,} bytes"


def iter_lines(path: Path | str, key: str, bound: Bound, span: Span | None = None) -> Iterator[Line]:
    """The lines of a text file (plain, gzip or zstd by magic bytes), each at most `bound`; with
    `span`, only those lines of a plain file, numbered and placed as in the whole file.

    A UTF-8 BOM at the start is dropped (offsets still count it). Refused with one located
    LangadaptError (`key: ...`): a line over the bound, a truncated or corrupt compressed stream,
    a file named .gz/.zst that is not, NUL bytes in the first block (a binary file)."""
    with open_text(path, key) as stream:
        if span is not None:
            stream.restrict(span)
        yield from _split_lines(stream, bound, span)


def read_input_text(path: Path | str, key: str, max_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES, errors: str = "strict",
                    *, decompress: bool = False) -> str:
    """A whole input file as UTF-8 text: the one reader of a user's text file that is read whole.

    Plain (the default), the file as stored, through `read_input_bytes` (refused from its size
    before a byte is read): for files a library reads too (a model's config.json, tekken.json), where
    a compressed copy accepted here would fail there. With `decompress`, a file only langadapt reads
    (an evaluation text that is one document): opened as every text file is (`open_text`:
    decompressed by magic bytes, zstd frames checked whole, a binary file refused) and refused as
    one document over `max_bytes` once that much text is read. Either way decoded once, here: a BOM
    dropped, invalid UTF-8 reported at its offset counting the BOM (as `Line.offset` does), and
    `errors="replace"` for free-form notes, where a stray byte must not stop a run."""
    data = _decompressed(path, key, max_bytes) if decompress else read_input_bytes(path, key, max_bytes)
    try:
        return data.decode("utf-8-sig", errors=errors)
    except UnicodeDecodeError as exc:  # the decoder counts from after a BOM; the user's editor does not
        at = exc.start + (len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0)
        raise LangadaptError(f"{key}: {path}: invalid UTF-8 at byte {at}") from None


def _decompressed(path: Path | str, key: str, max_bytes: int) -> bytes:
    """A file's whole decompressed text, refused as one document once it passes `max_bytes`."""
    parts, total = [], 0
    with open_text(path, key) as stream:
        while chunk := stream.read(CHUNK_BYTES):
            total += len(chunk)
            if total > max_bytes:
                raise Bound(max_bytes, setting=None).refuse(key, "the file", path, "one document")
            parts.append(chunk)
    return b"".join(parts)


def read_input_json(path: Path | str, key: str) -> Any:
    """A whole JSON file a user gave (a model's config.json, a safetensors index, tekken.json):
    `read_input_text`'s bound and checks, then `parse_json`'s."""
    return parse_json(read_input_text(path, key), f"{key}: {path} is not valid JSON")


def _split_lines(stream: TextStream, bound: Bound, span: Span | None = None) -> Iterator[Line]:
    """Lines from fixed-size chunks; the unfinished line is checked against the bound per chunk.

    Editors on Windows start a file with a BOM: it is no part of the first document (in JSON Lines
    it would make line 1 invalid JSON), so it is skipped; offsets still count it."""
    number, offset = (span.first_line - 1, span.start) if span else (0, 0)
    pending: list[bytes] = []  # pieces of the line not yet ended by a newline
    pending_bytes, first = 0, offset == 0
    while chunk := stream.read(CHUNK_BYTES):
        start = len(codecs.BOM_UTF8) if first and chunk.startswith(codecs.BOM_UTF8) else 0
        offset, first = offset + start, False
        while (end := chunk.find(b"\n", start)) != -1:
            number += 1
            if pending_bytes + end - start > bound.max_bytes:
                raise bound.refuse(stream.key, f"line {number}", stream.path, f"from byte {offset} of its text")
            raw = b"".join((*pending, chunk[start:end + 1])) if pending else chunk[start:end + 1]
            pending, pending_bytes, start = [], 0, end + 1
            yield Line(number, offset, raw)
            offset += len(raw)
        if start < len(chunk):
            pending.append(chunk[start:])
            pending_bytes += len(chunk) - start
            if pending_bytes > bound.max_bytes:
                raise bound.refuse(stream.key, f"line {number + 1}", stream.path,
                                   f"from byte {offset} of its text, no newline in the first {_size(pending_bytes)}")
    if pending:
        yield Line(number + 1, offset, b"".join(pending))


class TextStream:
    """The decompressed bytes of one open input file; every read error becomes one located line."""

    def __init__(self, path: Path | str, key: str, raw: IO[bytes], kind: str | None) -> None:
        self.path, self.key, self.raw, self.kind = path, key, raw, kind
        self.text_bytes = 0  # decompressed bytes handed out so far
        self.left: int | None = None  # bytes still to hand out when restricted to a span
        self.reader: IO[bytes] = decompressor(raw, kind)

    def restrict(self, span: Span) -> None:
        """Read only the bytes of `span` (plain files: compressed streams cannot be entered midway)."""
        if self.kind is not None:
            raise ValueError(f"{self.path}: a span of a {self.kind} file cannot be read on its own")
        self.raw.seek(span.start)
        self.text_bytes, self.left = span.start, span.stop - span.start

    def read(self, size: int) -> bytes:
        """At most `size` decompressed bytes (b"" at the end)."""
        if self.left is not None:
            size = min(size, self.left)
            if size <= 0:
                return b""
        try:
            data = self.reader.read(size)
        except EOFError:  # gzip: the end-of-stream marker never came
            raise LangadaptError(
                f"{self.key}: cannot read {self.path}: it is truncated at byte {os.fstat(self.raw.fileno()).st_size} "
                f"(the file's "
                f"end, inside a gzip stream or in bytes after its last member that are not gzip, after "
                f"{self.text_bytes:,} bytes of text); the rest of the corpus "
                f"would be lost: copy or write the file again (gzip -t {self.path} checks it)"
            ) from None
        except decompression_errors() as err:
            raise LangadaptError(
                f"{self.key}: cannot read {self.path} at byte {self.raw.tell()} of the file (after "
                f"{self.text_bytes:,} bytes of text; corrupt or truncated): {' '.join(str(err).split())}; "
                f"copy or write the file again ({'gzip' if self.kind == 'gzip' else 'zstd'} -t {self.path} checks it)"
            ) from None
        if self.text_bytes < _SNIFF_BYTES and b"\x00" in data[: _SNIFF_BYTES - self.text_bytes]:
            raise LangadaptError(f"{self.key}: {self.path} looks binary (NUL byte at offset "
                                 f"{self.text_bytes + data.index(0)}), not text")
        self.text_bytes += len(data)
        if self.left is not None:
            self.left -= len(data)
        return data

    def close(self) -> None:
        if self.reader is not self.raw:
            self.reader.close()
        self.raw.close()


@contextmanager
def open_text(path: Path | str, key: str) -> Iterator[TextStream]:
    """Open an input file (`files.open_input`: FIFOs and folders refused) for bounded reading:
    compression by magic bytes, zstd frames checked complete first; a NUL byte in the first
    `_SNIFF_BYTES` of text refuses the file as binary (a stray escaped NUL later is the caller's)."""
    raw = open_input(path, key)
    try:
        kind = compression_of(raw.peek(4)[:4])  # type: ignore[attr-defined]
        named = COMPRESSED_SUFFIXES.get(Path(path).suffix.lower())
        if named is not None and kind is None:
            raise LangadaptError(f"{key}: cannot read {path}: it is named {Path(path).suffix} but is not {named} "
                                 "data (truncated to its first bytes, or mislabelled)")
        if kind == "zstd":
            check_zstd_frames(raw, path, key)
        stream = TextStream(path, key, raw, kind)
    except BaseException:
        raw.close()
        raise
    try:
        yield stream
    finally:
        stream.close()
