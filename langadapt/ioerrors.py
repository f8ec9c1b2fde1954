"""OS-level trouble a user fixes, as one line: failed writes, and input files that are not what they claim.

Writes: disk full, quota exceeded, read-only file system.

They surface in many shapes: `OSError(ENOSPC)` from Python, `SafetensorError` ("No space left
on device (os error 28)") from safetensors, a `RuntimeError` from torch's zip writer whose
context is the OS error. `disk_error_line` recognises them along the exception chain, and
`writing(path, what)` turns one into a `LangadaptError` naming the path being written; the CLI
uses the same function for writes no `writing` block wraps. A folder the run writes into (the run
folder under run_root, made by the run lock first) is made by `make_folder`, through the same
`writing`: besides the disk failures, a folder this user may not write into (`EACCES`/`EPERM`,
a run_root under a mode-555 folder) is one line naming the folder in the way, not a traceback.

Reads: every input file (corpus, evaluation data, base model and tokenizer files) is opened by
`open_input`, or checked by `input_problem` before a library opens it. A FIFO, device or socket
given as a file would block the open (and a blocked open ignores SIGTERM), a directory fails with
an unhelpful IsADirectoryError: they are refused by their `stat` mode instead. Compressed inputs
are decompressed by `decompressing` (by magic bytes); `input_problem` also reads the first
compressed block, so a corrupt header, a file named `.zst` that is not zstd, or an empty file is
found by the preflight check, before any training.
"""

from __future__ import annotations

import codecs
import errno
import getpass
import gzip
import io
import json
import os
import shutil
import stat
import sys
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from langadapt.errors import LangadaptError

DISK_ERRNOS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EFBIG: "file too large for this file system (or ulimit -f)",
}
_MESSAGES = {"No space left on device": errno.ENOSPC, "os error 28": errno.ENOSPC, "StorageFull": errno.ENOSPC,
             "Disk quota exceeded": errno.EDQUOT, "Read-only file system": errno.EROFS}
FULL_BELOW_BYTES = 1 << 20
"""Free space below which a file system counts as full (tmpfs and quotas leave a few blocks)."""
PATH_LOCALS = ("path", "save_directory", "directory", "folder", "tmp", "final", "out", "filename")
"""Local names under which langadapt and its libraries hold the path being written (a last resort
when the error carries no file name)."""


def disk_problem(exc: BaseException) -> str | None:
    """'no space left on device' (etc.) when `exc` or its cause/context is such a failure."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in DISK_ERRNOS:
            return DISK_ERRNOS[current.errno]
        if not isinstance(current, OSError):  # SafetensorError, torch's RuntimeError: only a message
            for text, code in _MESSAGES.items():
                if text in str(current):
                    return DISK_ERRNOS[code]
        current = current.__cause__ or current.__context__
    return None


def written_path(exc: BaseException) -> str | None:
    """The file an I/O error was about: its `filename`, else a path-named local in the deepest frame."""
    current: BaseException | None = exc
    while current is not None:
        if isinstance(current, OSError) and current.filename:
            return str(current.filename)
        current = current.__cause__ or current.__context__
    tb, found = exc.__traceback__, None
    while tb is not None:
        for name in PATH_LOCALS:
            value = tb.tb_frame.f_locals.get(name)
            if isinstance(value, (str, Path)) and str(value):
                found = str(value)
                break
        tb = tb.tb_next
    return found


def _full_at(path: str | None) -> bool:
    """The file system holding `path` (or its nearest existing parent) has (almost) no space left."""
    if path is None:
        return False
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return shutil.disk_usage(probe).free < FULL_BELOW_BYTES
    except OSError:
        return False


def disk_error_line(exc: BaseException, path: Path | str | None = None) -> str | None:
    """One line for a disk failure (None for anything else): path, problem, what to do.

    torch's zip writer reports a full disk as "unexpected pos ..." with no errno; a failed write
    on a file system with no space left is taken to be that."""
    where = str(path) if path is not None else written_path(exc)
    problem = disk_problem(exc)
    if problem is None and isinstance(exc, (OSError, RuntimeError)) and _full_at(where):
        problem = DISK_ERRNOS[errno.ENOSPC]
    if problem is None:
        return None
    where = where or "a file of this run"
    return (f"{where}: cannot write: {problem}; free space (or move run_root) and run again: "
            "completed stages and checkpoints are kept")


ACCESS_ERRNOS = {errno.EACCES: "permission denied", errno.EPERM: "operation not permitted"}
"""What a write into a folder this user may not write into fails with (mode 555, another owner)."""


def _os_error(exc: BaseException) -> OSError | None:
    """The first OSError along `exc`'s cause/context chain (a library may wrap it)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError):
            return current
        current = current.__cause__ or current.__context__
    return None


def _user() -> str:
    """This process's user name (its uid where the name cannot be looked up, as in a container)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.geteuid()}"


def access_error_line(exc: BaseException, path: Path | str | None = None) -> str | None:
    """One line for a write refused by permissions (None for anything else): the folder in the way
    and what to do. The folder is the parent of what could not be made (mkdir, open for writing),
    or the file itself when it exists and is read-only."""
    error = _os_error(exc)
    if error is None or error.errno not in ACCESS_ERRNOS:
        return None
    where = str(path) if path is not None else (str(error.filename) if error.filename else "a file of this run")
    blocked = Path(str(error.filename)) if error.filename else Path(where)
    if not blocked.exists():
        blocked = blocked.parent
    return (f"{where}: cannot write: {ACCESS_ERRNOS[error.errno]} ({blocked} is not writable by {_user()}); "
            f"set run_root to a folder you can write, or get write access to {blocked}")


SHAPE_ERRNOS = {errno.EEXIST, errno.ENOTDIR, errno.EISDIR}
"""What writing fails with when a path is of the wrong kind: a file where a folder is needed (the
run folder, or a folder on the way to it) or a folder where a file is to be written."""


def _file_on_the_way(path: Path) -> Path | None:
    """The first existing path from the root down to `path` that is not a folder."""
    for part in (*reversed(path.parents), path):
        if part.exists() and not part.is_dir():
            return part
    return None


def shape_error_line(exc: BaseException, path: Path | str | None = None) -> str | None:
    """One line for a path of the wrong kind (None for anything else): which path is a file where
    a folder is needed, or a folder where a file is to be written."""
    error = _os_error(exc)
    if error is None or error.errno not in SHAPE_ERRNOS or not error.filename:
        return None
    failed = Path(str(error.filename))
    where = str(path) if path is not None else str(failed)
    if error.errno == errno.EISDIR:
        return f"{where}: cannot write: {failed} is a folder where a file is to be written; move it away or choose another path"
    blocker = _file_on_the_way(failed)
    if blocker is None:  # EEXIST of a folder (a bug of ours, not the user's), or the file is gone again
        return None
    return f"{where}: cannot write: {blocker} is a file where a folder is needed; move it away or choose another path"


def os_error_line(exc: BaseException, path: Path | str | None = None) -> str | None:
    """One line for an OS failure the user fixes (a full or read-only disk, a folder not writable
    by this user, a file where a folder is needed or the reverse), or None for anything else: the
    one place such errors become lines (`writing` blocks and the CLI's last resort)."""
    return disk_error_line(exc, path) or access_error_line(exc, path) or shape_error_line(exc, path)


@contextmanager
def writing(path: Path, what: str) -> Iterator[None]:
    """Turn a disk or permission failure inside the block into a LangadaptError naming `path`
    (`what`: e.g. "checkpoint")."""
    try:
        yield
    except Exception as exc:
        line = os_error_line(exc, path)
        if line is None:
            raise
        raise LangadaptError(f"{what} {line}") from exc


def make_folder(path: Path, what: str) -> Path:
    """Create the folder `path` (and its parents) as `writing` reports a failure: a run_root under
    a folder this user cannot write, on a read-only or full file system, is one line naming the
    folder, where a bare `mkdir` raised a traceback from wherever the folder was first needed."""
    with writing(path, what):
        path.mkdir(parents=True, exist_ok=True)
    return path


# --- input files -----------------------------------------------------------------------------

NOT_REGULAR = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
               (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
COMPRESSED_SUFFIXES = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}
PROBE_BYTES = 1 << 16
"""How much decompressed text `input_problem` reads: enough to get past a corrupt header and the
first block, cheap at any file size (the rest is checked while streaming, see `decompression_errors`)."""


def file_kind(mode: int) -> str | None:
    """'a FIFO', 'a directory', ... for a `stat` mode that is not a regular file; None for a regular one."""
    return next((kind for test, kind in NOT_REGULAR if test(mode)), None)


def open_input(path: Path | str, key: str) -> IO[bytes]:
    """Open an input file for reading as bytes; a LangadaptError `key: path ...` when it cannot be.

    O_NONBLOCK makes opening a FIFO return at once (a plain open waits for a writer, forever, and
    ignores SIGTERM meanwhile); the mode of what was opened then decides, so there is no window
    between checking and opening. Blocking mode is restored for the regular file that is left."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise LangadaptError(f"{key}: cannot read {path}: {exc.strerror}") from None
    kind = file_kind(os.fstat(fd).st_mode)
    if kind is not None:
        os.close(fd)
        raise LangadaptError(f"{key}: {path} is not a regular file ({kind})")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def irregular_files(folder: Path) -> list[str]:
    """'PATH is not a regular file (a FIFO)' for each top-level entry of a model or tokenizer
    folder that a library would block on or fail to open; sub-folders (`original/`) and hidden
    entries are left alone, as is a dangling link (whoever needs the file says it is missing)."""
    problems = []
    for entry in sorted(folder.iterdir()):
        try:
            kind = file_kind(entry.stat().st_mode)
        except OSError:
            continue
        if kind is not None and kind != "a directory" and not entry.name.startswith("."):
            problems.append(f"{entry} is not a regular file ({kind})")
    return problems


MAX_INPUT_TEXT_BYTES = 64 << 20
"""Bound on a user's file that is read whole (a model's config.json, a safetensors index, a
tokenizer's tekken.json, a bilingual dictionary, a licence note): the largest real one is a
256k-vocabulary tokenizer file of about 35 MB; a config.json of gigabytes is not a config."""


def read_input_bytes(path: Path | str, key: str, max_bytes: int = MAX_INPUT_TEXT_BYTES) -> bytes:
    """A whole input file's bytes, through `open_input`: the one reader of user files that are read
    whole (binary ones, e.g. a SentencePiece tokenizer.model, directly; text through
    `read_input_text`). A file over `max_bytes` is refused from its size before a byte is read
    (and, should it grow meanwhile, after `max_bytes + 1`, never whole)."""
    with open_input(path, key) as f:
        size = os.fstat(f.fileno()).st_size
        data = f.read(max_bytes + 1) if size <= max_bytes else b""
    if max(size, len(data)) > max_bytes:
        raise LangadaptError(f"{key}: {path} is {max(size, len(data)):,} bytes, more than the {max_bytes:,} such a "
                             "file may have (read whole): is it the right file?")
    return data


def read_input_text(path: Path | str, key: str, max_bytes: int = MAX_INPUT_TEXT_BYTES, errors: str = "strict") -> str:
    """A whole input file as UTF-8 text (a BOM is dropped), read by `read_input_bytes`.
    `errors="replace"` for free-form notes, where a stray byte must not stop a run."""
    data = read_input_bytes(path, key, max_bytes)
    try:
        return data.decode("utf-8-sig", errors=errors)
    except UnicodeDecodeError as exc:  # the decoder counts from after a BOM; the user's editor does not
        at = exc.start + (len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0)
        raise LangadaptError(f"{key}: {path}: invalid UTF-8 at byte {at}") from None


def parse_json(text: str, what: str, suffix: str = "") -> Any:
    """`json.loads` for JSON a user gave, every failure one `LangadaptError` line "`what`: why`suffix`":
    malformed text (with line and column in a multi-line file), and nesting deeper than Python's
    recursion limit, which `json` raises as a RecursionError (a `[[[...` line of a few thousand
    brackets in a corpus was a traceback). Every reader of user JSON goes through here."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        where = f" (line {err.lineno}, column {err.colno})" if "\n" in text.rstrip("\n") else ""
        raise LangadaptError(f"{what}: {err.msg}{where}{suffix}") from None
    except RecursionError:
        raise LangadaptError(f"{what}: nested deeper than {sys.getrecursionlimit():,} levels{suffix}") from None


def read_input_json(path: Path | str, key: str) -> Any:
    """A whole JSON file a user gave (a model's config.json, a safetensors index, tekken.json):
    `read_input_text`'s bound and checks, then `parse_json`'s."""
    return parse_json(read_input_text(path, key), f"{key}: {path} is not valid JSON")


def compression_of(head: bytes) -> str | None:
    """'gzip' or 'zstd' from a file's first bytes; None for anything else (read as it is)."""
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    return None


def decompressing(raw: IO[bytes]) -> IO[bytes]:
    """`raw` decompressed when its magic bytes say gzip or zstd (whatever its name), else `raw` itself."""
    if not hasattr(raw, "peek"):
        raw = io.BufferedReader(raw)  # type: ignore[arg-type]
    kind = compression_of(raw.peek(4)[:4])  # type: ignore[attr-defined]
    if kind == "gzip":
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]
    if kind == "zstd":
        import zstandard

        reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True, closefd=True)
        return io.BufferedReader(reader)  # type: ignore[arg-type,return-value]
    return raw


def decompression_errors() -> tuple[type[BaseException], ...]:
    """What gzip and zstandard raise for corrupt or truncated data (OSError covers BadGzipFile)."""
    import zstandard

    return (OSError, EOFError, zlib.error, zstandard.ZstdError)


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
            if kind == "zstd":  # a frame cut short decompresses quietly to less: walk its headers first
                zstd_frames(raw, path, "")
            stream = decompressing(raw)
            named = COMPRESSED_SUFFIXES.get(Path(path).suffix.lower())
            if named is not None and kind is None:
                return f"{path} is named {Path(path).suffix} but is not {named} data"
            if kind is not None and not stream.read(PROBE_BYTES):
                return f"{path} is empty (its {kind} data decompresses to nothing)"
    except LangadaptError as exc:
        return str(exc).removeprefix(": ")
    except decompression_errors() as exc:
        return f"{path} is not valid {kind} data ({' '.join(str(exc).split()) or type(exc).__name__})"
    return None


# --- zstd frames: a cut stream decompresses quietly to less, so its headers are walked first ---

_SKIPPABLE = range(0x184D2A50, 0x184D2A60)
_MAX_FRAME_HEADER = 18


def _file_size(raw: IO[bytes]) -> int:
    return os.fstat(raw.fileno()).st_size


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

    size, frames, position = _file_size(raw), [], 0
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
