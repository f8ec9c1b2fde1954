"""Content hashes of a stage's input files, cached so that a finished run re-checks in seconds.

Fingerprints hash what a file contains, not its mtime: `touch`, a copy, or a re-download of the
same bytes must not re-run a stage that took hours. Reading a 15 GB base model takes a while, so
each hash is cached under (path, size, mtime): an unchanged file is never read twice, a touched
one is read once and then found identical.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

CHUNK = 1 << 22


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _files(path: Path) -> list[Path]:
    """A file itself; a folder's files, leaving out hidden ones (caches, our own work folders)."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        return []
    return sorted(
        f for f in path.rglob("*")
        if f.is_file() and not any(part.startswith(".") for part in f.relative_to(path).parts)
    )


class HashCache:
    """(path, size, mtime_ns) -> sha256, kept in a JSON file (or only in memory when `file` is None)."""

    def __init__(self, file: Path | None) -> None:
        self.file = file
        self._entries: dict[str, list] = {}
        self._dirty = False
        if file is not None and file.is_file():
            try:
                self._entries = json.loads(file.read_text())
            except ValueError:  # a cache cut short by a kill: start again, it is only a cache
                self._entries = {}

    def sha256(self, path: Path) -> str:
        stat = path.stat()
        key = str(path.resolve())
        entry = self._entries.get(key)
        if entry and entry[0] == stat.st_size and entry[1] == stat.st_mtime_ns:
            return entry[2]
        digest = file_sha256(path)
        self._entries[key] = [stat.st_size, stat.st_mtime_ns, digest]
        self._dirty = True
        return digest

    def hash_paths(self, paths: Iterable[Path], relative_to: Path | None = None) -> dict[str, str]:
        """sha256 of every file under `paths`; keys relative to `relative_to` when given (a base
        model found at another path with the same bytes is the same input)."""
        hashes = {}
        for path in paths:
            for f in _files(Path(path)):
                name = str(f.relative_to(relative_to)) if relative_to is not None else str(f)
                hashes[name] = self.sha256(f)
        return hashes

    def save(self) -> None:
        if self.file is None or not self._dirty or not self.file.parent.is_dir():
            return
        tmp = self.file.with_name(f"{self.file.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self._entries, indent=0, sort_keys=True))
        os.replace(tmp, self.file)
        self._dirty = False
