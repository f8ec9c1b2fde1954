"""Compressed input: gzip or zstd by magic bytes (whatever the file's name), and checks that a
compressed file is whole before anything is read from it.

`decompressor` is the one place a decompressing reader is made (the bounded text reader
`text.TextStream` and the preflight's `input_problem` both take theirs from it). `input_problem`
reads at most the first `PROBE_BYTES` of text, so a corrupt header, a file named `.zst` that is
not zstd, or an empty file is found by the preflight check, before any training; the rest is
checked while streaming.

zstd's stream reader returns quietly at the end of its input even inside a frame (a streaming
writer that was never closed, a cut download), and zstandard exposes no "frame finished" state on
its reader, so `zstd_frames` walks the frame and block headers first (RFC 8878, sizes only, no
decompression) and refuses a frame that runs past the file's end. libzstd itself verifies a
frame's content size and checksum when the header carries them; `check_zstd_frames` says once per
file when frames carry no checksum, since a flipped byte inside them can decode to other text
unnoticed.
"""

from __future__ import annotations

import logging
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from isal import igzip, isal_zlib

from langadapt.errors import LangadaptError
from langadapt.inputs.files import open_input

log = logging.getLogger("langadapt.data")  # the data stage's logger: a corpus is what is compressed

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
COMPRESSED_SUFFIXES = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}
PROBE_BYTES = 1 << 16
"""How much decompressed text `input_problem` reads: enough to get past a corrupt header and the
first block, cheap at any file size (the rest is checked while it is read: `text.TextStream`)."""


def compression_of(head: bytes) -> str | None:
    """'gzip' or 'zstd' from a file's first bytes; None for anything else (read as it is)."""
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    return None


def decompressor(raw: IO[bytes], kind: str | None) -> IO[bytes]:
    """A reader of `raw`'s decompressed bytes for `kind` ('gzip', 'zstd' or None: `raw` itself).
    Closing it leaves `raw` open: the caller opened `raw` and closes it (and reads its position
    and size for the error lines)."""
    if kind == "gzip":
        # ISA-L's inflate behind gzip.GzipFile's interface: half the CPU of Python's gzip module
        # (0.45 against 0.92 CPU s per 120 MB of text), and the corpus and every data-stage file
        # are read through here, some more than once. The same bytes come out; it reads bytes
        # after the last member that are not gzip as a stream cut short (EOFError), where gzip
        # says "not a gzipped file": the truncation line says both.
        return igzip.IGzipFile(fileobj=raw)  # type: ignore[return-value]
    if kind == "zstd":
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True, closefd=False)  # type: ignore[return-value]
    return raw


def decompression_errors() -> tuple[type[BaseException], ...]:
    """What `decompressor`'s readers raise for corrupt or truncated data (OSError covers BadGzipFile;
    ISA-L's inflate raises its own error for a bad deflate block)."""
    import zstandard

    return (OSError, EOFError, zlib.error, isal_zlib.error, zstandard.ZstdError)


def input_problem(path: Path | str) -> str | None:
    """Why `path` is no good as an input file, as 'PATH is ...' (None when it is fine).

    Missing, not a regular file, empty, named compressed but not (`.zst` holding text), or a
    compressed file whose header or first block does not decompress, or decompresses to nothing.
    Reads at most the first `PROBE_BYTES` of text: for the preflight check, before any training."""
    kind = None
    try:
        with open_input(path, "") as raw:
            if os.fstat(raw.fileno()).st_size == 0:
                return f"{path} is empty"
            kind = compression_of(raw.peek(4)[:4])  # type: ignore[attr-defined]
            named = COMPRESSED_SUFFIXES.get(Path(path).suffix.lower())
            if named is not None and kind is None:
                return f"{path} is named {Path(path).suffix} but is not {named} data"
            if kind == "zstd":  # a frame cut short decompresses quietly to less: walk its headers first
                zstd_frames(raw, path, "")
            if kind is not None:
                with decompressor(raw, kind) as stream:
                    if not stream.read(PROBE_BYTES):
                        return f"{path} is empty (its {kind} data decompresses to nothing)"
    except LangadaptError as exc:
        return str(exc).removeprefix(": ")
    except decompression_errors() as exc:
        return f"{path} is not valid {kind} data ({' '.join(str(exc).split()) or type(exc).__name__})"
    return None


# --- zstd frames: a cut stream decompresses quietly to less, so its headers are walked first ---

_SKIPPABLE = range(0x184D2A50, 0x184D2A60)
_MAX_FRAME_HEADER = 18


@dataclass(frozen=True)
class ZstdFrame:
    """Where one zstd frame lies in its file, and what its header declares."""

    start: int
    end: int
    content_size: int | None
    has_checksum: bool


def zstd_frames(raw: IO[bytes], path: Path | str, key: str) -> list[ZstdFrame]:
    """Walk the frame and block headers of a zstd file (seeking over block contents): a frame
    that runs past the file's end (a last block never written, a cut copy) or bytes that are no
    frame are one LangadaptError with the byte offset. Leaves `raw` at its start."""
    import zstandard

    size, frames, position = os.fstat(raw.fileno()).st_size, [], 0
    try:
        while position < size:
            raw.seek(position)
            head = raw.read(_MAX_FRAME_HEADER)
            magic = int.from_bytes(head[:4], "little")
            if len(head) >= 8 and magic in _SKIPPABLE:  # metadata frames: a length, then bytes to skip
                position += 8 + int.from_bytes(head[4:8], "little")
                continue
            if not head.startswith(ZSTD_MAGIC):
                raise _not_zstd(key, path, position, len(frames))
            try:
                header = zstandard.frame_header_size(head)
                params = zstandard.get_frame_parameters(head[:header])
            except zstandard.ZstdError as err:
                if position + _MAX_FRAME_HEADER <= size:  # the bytes are there: they are wrong
                    raise LangadaptError(f"{key}: {path} is not valid zstd data (frame {len(frames) + 1} at byte "
                                         f"{position}: {' '.join(str(err).split())})") from None
                raise _cut(key, path, len(frames), position, size, "its header") from None
            end = _blocks_end(raw, position + header, size)
            if end is None:
                raise _cut(key, path, len(frames), position, size, "its last block")
            end += 4 if params.has_checksum else 0
            if end > size:
                raise _cut(key, path, len(frames), position, size, "its checksum")
            content = None if params.content_size == zstandard.CONTENTSIZE_UNKNOWN else params.content_size
            frames.append(ZstdFrame(position, end, content, params.has_checksum))
            position = end
    finally:
        raw.seek(0)
    return frames


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


def _blocks_end(raw: IO[bytes], position: int, size: int) -> int | None:
    """Where the block after the frame header at `position` ends (past the last block); None when
    the file ends first. Block header (RFC 8878 3.1.1.2): 3 bytes little-endian, bit 0 last block,
    bits 1-2 type (0 raw, 1 RLE: one byte stored, 2 compressed), bits 3-23 stored size."""
    while True:
        raw.seek(position)
        header = raw.read(3)
        if len(header) < 3:
            return None
        value = int.from_bytes(header, "little")
        stored = 1 if (value >> 1) & 3 == 1 else value >> 3
        position += 3 + stored
        if position > size:
            return None
        if value & 1:
            return position


def _cut(key: str, path: Path | str, index: int, start: int, size: int, missing: str) -> LangadaptError:
    return LangadaptError(
        f"{key}: cannot read {path}: it is truncated at byte {size} (the file's end): zstd frame {index + 1} "
        f"(from byte {start}) has no end ({missing} is missing: a streaming writer that was never closed, "
        f"a cut copy, or a corrupt block header); the rest of the corpus would be lost: copy or write the "
        f"file again (zstd -t {path} checks it)"
    )


def _not_zstd(key: str, path: Path | str, position: int, index: int) -> LangadaptError:
    return LangadaptError(
        f"{key}: cannot read {path}: at byte {position}, after {index} complete zstd frame(s), comes data "
        f"that is no zstd frame (corrupt, or another file appended); zstd -t {path} checks it"
    )
