"""Opening a user's input file, and reading one whole: the lowest step of every read of user input.

Every input file (corpus, evaluation data, base model and tokenizer files) is opened by
`open_input`, or checked by `compression.input_problem` (which opens it so) before a library
opens it. A FIFO, device or socket given as a file would block the open (and a blocked open
ignores SIGTERM), a directory fails with an unhelpful IsADirectoryError: they are refused by
their `stat` mode instead. A file read whole is bounded by `read_input_bytes` before a byte of it
is read; every piece of JSON a user gave is parsed by `parse_json`.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import IO, Any

import orjson

from langadapt.errors import LangadaptError

MIB = 1 << 20
DEFAULT_MAX_DOCUMENT_BYTES = 64 * MIB
"""The one default bound on a piece of user input held in memory whole: one document (a corpus
line, paragraph or Parquet cell, a text file that is one document; `data.max_document_bytes`
moves it for the data stage) and one file read whole (a model's config.json, a safetensors index,
a tokenizer's tekken.json, a bilingual dictionary, a licence note).

Why 64 MiB: far above any real one (a book is a few MB; the largest real file read whole, a
256k-vocabulary tokenizer file, is about 35 MB), far below what exhausts a machine's memory (a
config.json of gigabytes is not a config). One number for both, so no file a user gives is taken
by one reader and refused by another."""
MAX_DOCUMENT_BYTES_CEILING = 256 * MIB
"""Highest bound a recipe may set: a tokenizer or a cleaning filter over one 256 MB string is
already minutes of work, and `text.WRITTEN_LINE_BYTES` must stay a bound."""
NOT_REGULAR = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
               (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


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


def read_input_bytes(path: Path | str, key: str, max_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES) -> bytes:
    """A whole input file's bytes as stored (no decompression), through `open_input`: binary files
    a library decodes itself (a SentencePiece tokenizer.model, an lm-eval task YAML) directly, and plain
    text through `text.read_input_text`. A file over `max_bytes` is refused from its size before a
    byte is read (and, should it grow meanwhile, after `max_bytes + 1`, never whole)."""
    with open_input(path, key) as f:
        size = os.fstat(f.fileno()).st_size
        data = f.read(max_bytes + 1) if size <= max_bytes else b""
    if max(size, len(data)) > max_bytes:
        raise LangadaptError(f"{key}: {path} is {max(size, len(data)):,} bytes, more than the {max_bytes:,} such a "
                             "file may have (read whole): is it the right file?")
    return data


def parse_json(text: str, what: str, suffix: str = "") -> Any:
    """`json.loads` for JSON a user gave, every failure one `LangadaptError` line "`what`: why`suffix`":
    malformed text (with line and column in a multi-line file), and nesting deeper than Python's
    recursion limit, which `json` raises as a RecursionError (a `[[[...` line of a few thousand
    brackets in a corpus was a traceback). Every reader of user JSON goes through here.

    orjson parses first: half of json's CPU on corpus lines (benchmarks/README.md, data_scale,
    session 18), the same objects. Where it could differ, json decides: orjson refuses NaN and
    Infinity, lone surrogates and nesting past 1,024 levels (json's message then names the
    problem, or json accepts as it always did), and turns an integer past 64 bits into a float
    (an id would change), which `_holds_big_float` detects."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    else:
        if not _holds_big_float(value):
            return value
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        where = f" (line {err.lineno}, column {err.colno})" if "\n" in text.rstrip("\n") else ""
        raise LangadaptError(f"{what}: {err.msg}{where}{suffix}") from None
    except RecursionError:
        raise LangadaptError(f"{what}: nested deeper than {sys.getrecursionlimit():,} levels{suffix}") from None


def _holds_big_float(value: Any) -> bool:
    """Whether a float of 2**63 or more is anywhere in `value`: what orjson makes of an integer too
    large for 64 bits (a genuine float that large is re-parsed by json to the same float). A loop,
    not recursion: orjson nests 1,024 levels, deeper than Python's recursion limit allows."""
    pending = [value]
    while pending:
        item = pending.pop()
        if type(item) is float and abs(item) >= 2.0 ** 63:
            return True
        if type(item) is dict:
            pending.extend(item.values())
        elif type(item) is list:
            pending.extend(item)
    return False
