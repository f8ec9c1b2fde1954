"""The one reader of a user's text files: bounded per line, and either complete or an error.

Every file of text a user gives (corpus sources, evaluation texts and minimal pairs) and every
document file the data stage writes is read through `iter_lines`, so two promises hold by design,
not by each caller remembering them:

- Memory per line is bounded. The decompressed text is read in chunks of `CHUNK_BYTES` and a line
  longer than the bound is refused as soon as the unfinished line passes it, never after reading it
  whole: a one-line `.zst` that expands to gigabytes costs the bound plus a chunk, not the gigabytes
  (a bare `for line in stream` or `readline()` reads the whole line first).
- A file that ends early is an error, not a shorter corpus. gzip has an end-of-stream marker and a
  CRC32 (Python's `gzip` raises EOFError or BadGzipFile: turned into one located line here). zstd's
  stream reader returns quietly at the end of its input even inside a frame (a streaming writer that
  was never closed, a cut download): zstandard exposes no "frame finished" state on its reader, so
  `zstd_frames` walks the frame and block headers first (RFC 8878, sizes only, no decompression)
  and refuses a frame that runs past the file's end. libzstd itself verifies a frame's content size
  and checksum when the header carries them; frames without a checksum are said once per file,
  since a flipped byte inside them can decode to other text unnoticed.

Plain files carry no end mark: one cut at a line end cannot be told from a complete one (one cut
mid-line shows as a last line with no newline, which the callers name when it does not parse).
"""

from __future__ import annotations

import codecs
import gzip
import logging
import os
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, NamedTuple

from langadapt.errors import LangadaptError
from langadapt.ioerrors import COMPRESSED_SUFFIXES, ZstdFrame, compression_of, open_input, zstd_frames
from langadapt.recipe.data import DEFAULT_MAX_DOCUMENT_BYTES, MAX_DOCUMENT_BYTES_CEILING, MIB

log = logging.getLogger("langadapt.data")

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


def read_whole_text(path: Path | str, key: str, bound: Bound) -> str:
    """A file that is one document, as UTF-8 text (a BOM dropped); refused when over `bound`."""
    parts, total = [], 0
    with open_text(path, key) as stream:
        while chunk := stream.read(CHUNK_BYTES):
            total += len(chunk)
            if total > bound.max_bytes:
                raise bound.refuse(key, "the file", path, "one document")
            parts.append(chunk)
    try:
        return b"".join(parts).decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise LangadaptError(f"{key}: {path}: invalid UTF-8 at byte {exc.start}") from None


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
        self.reader: IO[bytes] = raw
        if kind == "gzip":
            self.reader = gzip.GzipFile(fileobj=raw)  # type: ignore[assignment]
        elif kind == "zstd":
            import zstandard

            self.reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True, closefd=False)

    def restrict(self, span: Span) -> None:
        """Read only the bytes of `span` (plain files: compressed streams cannot be entered midway)."""
        if self.kind is not None:
            raise ValueError(f"{self.path}: a span of a {self.kind} file cannot be read on its own")
        self.raw.seek(span.start)
        self.text_bytes, self.left = span.start, span.stop - span.start

    def read(self, size: int) -> bytes:
        """At most `size` decompressed bytes (b"" at the end)."""
        import zstandard

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
                f"end, inside a gzip stream, after {self.text_bytes:,} bytes of text); the rest of the corpus "
                f"would be lost: copy or write the file again (gzip -t {self.path} checks it)"
            ) from None
        except (OSError, zlib.error, zstandard.ZstdError) as err:
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
    """Open an input file (`ioerrors.open_input`: FIFOs and folders refused) for bounded reading:
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


def check_zstd_frames(raw: IO[bytes], path: Path | str, key: str) -> list[ZstdFrame]:
    """The frames of a zstd file, refused unless each ends inside the file; warns (once per file)
    when frames carry no checksum. Leaves `raw` at its start."""
    frames = zstd_frames(raw, path, key)
    unchecked = [f for f in frames if not f.has_checksum]
    if unchecked:
        log.warning("%s: %s: %d of its %d zstd frames carry no checksum, so corruption inside them cannot be "
                    "detected; compress with checksums (the zstd command's default; "
                    "zstandard.ZstdCompressor(write_checksum=True))", key, path, len(unchecked), len(frames))
    return frames
