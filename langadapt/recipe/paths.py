"""User strings that become path components: one rule, one place.

A recipe's `name` becomes `<run_root>/<name>/`, a source's name its shard folder, `eval --name`
an output folder. Each goes through `name_problem` (the schema's validators, the CLI) and the run's
folder is spelled only by `run_directory`, so no spelling of `../../x`, `/etc`, `a\\b`, a NUL or a
300-character name can reach the filesystem. (`run.layout` spells everything inside a run folder.)
"""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path

from langadapt.errors import LangadaptError

MAX_NAME_CHARS = 100
"""Longest name that becomes a folder (a run's `name`, a source's shard folder), the names langadapt
derives from a run's name included (`<name>_cold`, `<name>-<point id>`, `<name>-sweep-n4g8`): each
is checked where it is made, before anything runs, so a long name fails at load, not on a cluster."""
COLD_SUFFIX = "_cold"
"""A warm run's cold twin runs in `<run_root>/<name>_cold` (evaluation.cold_twin)."""


def name_problem(name: str) -> str | None:
    """Why `name` cannot be one folder name under its parent, or None when it can.

    Every user string that becomes a path component goes through here, so `../../x`, `/etc`, `a/b`,
    `a\\b`, a NUL or other control character, or a 300-character name can never turn into a
    folder outside the run root, a nested folder, or an OSError halfway through a run."""
    if not name or not name.strip():
        return "must not be empty"
    if len(name) > MAX_NAME_CHARS:
        return f"{len(name):,} characters; at most {MAX_NAME_CHARS}"
    if name in (".", ".."):
        return f"{name!r} is not a folder name"
    bad = next((c for c in name if c in "/\\" or unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")), None)
    if bad is not None:
        return f"must be one folder name, without {bad!r} (letters, digits, '_', '.', '-')"
    if name != name.strip():
        return "must not start or end with a space"
    return None


def check_name(name: str, what: str) -> str:
    """`name` when `name_problem` finds nothing; else one error line naming `what` set it."""
    problem = name_problem(name)
    if problem is not None:
        raise LangadaptError(f"{what}: {problem} (got {name[:60]!r}{'...' if len(name) > 60 else ''})")
    return name


def run_root_problem(run_root: str) -> str | None:
    """Why no run folder can be made under `run_root`, or None: a NUL (no path can hold one) or a
    folder on the way that is a regular file (mkdir would fail there with a traceback, late)."""
    if any(unicodedata.category(c) == "Cc" for c in run_root):
        return "must not contain control characters"
    path = Path(run_root).absolute()
    for folder in (path, *path.parents):
        if folder.exists():
            return None if folder.is_dir() else f"{folder} is a file, not a folder"
    return None


def run_directory(run_root: str | Path, name: str) -> Path:
    """`<run_root>/<name>`: the one place a run's folder is spelled. The name must be one folder
    name (`name_problem`) and the folder must lie directly under run_root, even lexically
    normalised (symlinks are left alone: a run root on scratch storage is a user's choice)."""
    check_name(name, "name")
    folder = Path(run_root) / name
    if Path(os.path.normpath(folder.absolute())).parent != Path(os.path.normpath(Path(run_root).absolute())):
        raise LangadaptError(f"name: {name!r} leads outside run_root {run_root}")
    return folder
