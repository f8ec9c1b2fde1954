"""Which files a source names: its globs expanded, a missing file fetched when the source says how.

Kept apart from reading them (`data.sources`): the preflight check, `langadapt plan` and the data
stage's plan of pieces all ask which files a source has now, and none of them reads a document.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

from langadapt.errors import LangadaptError
from langadapt.inputs.compression import input_problem
from langadapt.recipe.data import SourceConfig


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
            if source.format == "hf_disk" or (source.format == "auto" and saved_dataset(match)):
                continue
            found.append((key, match))
    return found


def saved_dataset(path: Path) -> bool:
    """Whether a folder is a `datasets` dataset saved with save_to_disk (read by `datasets`, not as files)."""
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
