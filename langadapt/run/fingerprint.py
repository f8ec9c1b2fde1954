"""Stage fingerprints: a stage re-runs exactly when something it reads changed.

Each print chains the stage's recipe sections, the seed, content hashes of the files it reads
from outside the run, and the print of the stage before it (a change upstream re-runs everything
downstream). Content, not mtimes: a finished run must stay finished after a copy or a `touch`.
"""

from __future__ import annotations

import glob
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from langadapt.recipe import LoadedRecipe
from langadapt.run.base_model import resolve_base_model
from langadapt.run.contenthash import HashCache


class StageLike(Protocol):
    name: str
    sections: tuple[str, ...]
    ignores: tuple[str, ...]


def fingerprints(loaded: LoadedRecipe, stages: Sequence[StageLike], base_model: str | None = None,
                 cache: HashCache | None = None) -> dict[str, str]:
    """Chain each stage's sections, seed and input files onto the previous stage's fingerprint.

    Inputs are content hashes (see `contenthash`) of the files a stage reads from outside the run:
    the local sources (data), the base model folder (tokenizer; embeddings and the rest inherit it
    through the chain) and the suite files (evaluate). Call it after the base model exists: a base
    that is still to be built or downloaded is recorded as missing, which matches no finished run.
    """
    recipe, previous, prints = loaded.recipe, "", {}
    cache = cache or HashCache(None)
    if base_model is None:
        base_model = resolve_base_model(recipe, fetch=False)
    for stage in stages:
        inputs: dict[str, Any] = {}
        if stage.name == "data":
            # A fetched source is defined by its `fetch` spec (hashed with the section); its file may
            # not exist yet when this runs, so hashing the file would change the print after a fetch.
            local = [s for s in recipe.data.sources if s.fetch is None]
            inputs = cache.hash_paths([Path(p) for s in local for p in _paths(s.path)])
        elif stage.name == "tokenizer" and recipe.base_model.path:
            # Keys relative to the folder: the same bytes under another path are the same base.
            inputs = cache.hash_paths([Path(base_model)], relative_to=Path(base_model)) if base_model \
                else {"base_model": "missing"}
        elif stage.name == "evaluate":
            inputs = cache.hash_paths([Path(p) for p in recipe.evaluation.suites])
        key = {"sections": loaded.section_hash(*stage.sections, ignore=stage.ignores), "seed": recipe.seed,
               "inputs": inputs, "previous": previous}
        prints[stage.name] = previous = hash_json(key)
    return prints


def hash_json(value: Any) -> str:
    """A short, stable hash of a JSON-able value (keys sorted): a stage's fingerprint."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _paths(path: str | list[str]) -> list[str]:
    patterns = [path] if isinstance(path, str) else path
    return [match for pattern in patterns for match in sorted(glob.glob(pattern))]
