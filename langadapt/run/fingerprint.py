"""Stage fingerprints: a stage re-runs exactly when something it reads changed.

Each print chains the stage's recipe sections, the seed, content hashes of the files it reads
from outside the run, and the print of the stage before it (a change upstream re-runs everything
downstream). Content, not mtimes: a finished run must stay finished after a copy or a `touch`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

from langadapt.recipe import LoadedRecipe, Recipe
from langadapt.run.base_model import resolve_base_model
from langadapt.run.contenthash import HashCache


@dataclass(frozen=True)
class OutsideFiles:
    """Files a stage reads from outside the run (local sources, the base model folder, suite files):
    their content hashes go into its print."""

    paths: tuple[Path, ...] = ()
    relative_to: Path | None = None
    """Hash keys relative to this folder: the same bytes under another path are the same input."""
    missing: str | None = None
    """An input that is not there yet (a base still to be built or downloaded), recorded under this
    name as missing, which matches no finished run."""
    named: tuple[tuple[str, Path], ...] = ()
    """(name, file or folder) hashed under the name, a folder's files under `name/<path inside>`:
    inputs found in a place that depends on the working directory (a suite found in the checkout)
    keep the same print wherever they were found."""

    def hashes(self, cache: HashCache) -> dict[str, str]:
        if self.missing is not None:
            return {self.missing: "missing"}
        hashes = cache.hash_paths(self.paths, relative_to=self.relative_to)
        for name, path in self.named:
            for inside, digest in cache.hash_paths((path,), relative_to=path).items():
                hashes[name if inside == "." else f"{name}/{inside}"] = digest
        return hashes


class StageLike(Protocol):
    name: str
    sections: tuple[str, ...]
    ignores: tuple[str, ...]
    at_default: tuple[str, ...]
    """Fields of `sections` the stage does not read that finished runs' prints hashed: hashed at
    their default value (`recipe_hash`)."""
    files: Callable[[str | None], OutsideFiles] | None
    """The files the stage reads from outside the run, given the resolved base model folder."""


def fingerprints(loaded: LoadedRecipe, stages: Sequence[StageLike], base_model: str | None = None,
                 cache: HashCache | None = None) -> dict[str, str]:
    """Chain each stage's sections, seed and input files onto the previous stage's fingerprint.

    Inputs are content hashes (see `contenthash`) of the files each stage says it reads from
    outside the run (`StageLike.files`). Call it after the base model exists: a base that is still
    to be built or downloaded is recorded as missing, which matches no finished run.
    """
    recipe, previous, prints = loaded.recipe, "", {}
    cache = cache or HashCache(None)
    if base_model is None:
        base_model = resolve_base_model(recipe, fetch=False)
    for stage in stages:
        inputs = stage.files(base_model).hashes(cache) if stage.files else {}
        key = {"sections": recipe_hash(loaded, stage), "seed": recipe.seed,
               "inputs": inputs, "previous": previous}
        prints[stage.name] = previous = hash_json(key)
    return prints


def recipe_hash(loaded: LoadedRecipe, stage: StageLike) -> str:
    """The recipe part of a stage's print: its sections less its ignores, with each `at_default`
    field read as its default value. Dropping a field from a print changes the print of every
    finished run; hashing it at its default changes none that left it unset, and a value set later
    re-runs nothing."""
    recipe = loaded.recipe
    if stage.at_default:
        recipe = _with_defaults(recipe, [key.split(".") for key in stage.at_default])
    return section_hash(recipe, stage.sections, ignore=stage.ignores)


def section_hash(recipe: Recipe, sections: Iterable[str], ignore: Iterable[str] = ()) -> str:
    """Stable hash of some parts of the resolved recipe (stage fingerprints). A part is a section
    or a dotted field (`data.document_masking`); `name[]` stands for every item of the list
    `name` (`data.sources[].weight`: each source's weight). `ignore` leaves fields out of them."""
    data = recipe.model_dump(mode="json")
    for dotted in ignore:
        _drop(data, dotted.split("."))
    picked = {s: _pick(data, s.split(".")) for s in sections}
    blob = json.dumps(picked, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _pick(tree: Any, keys: list[str]) -> Any:
    """The value at `keys` (a `name[]` key maps over that list's items)."""
    if not keys:
        return tree
    key, rest = keys[0], keys[1:]
    if key.endswith("[]"):
        return [_pick(item, rest) for item in tree[key[:-2]]]
    return _pick(tree[key], rest)


def _drop(tree: Any, keys: list[str]) -> None:
    """Remove the field at `keys` in place (from every item where a key is `name[]`)."""
    key, rest = keys[0], keys[1:]
    if key.endswith("[]"):
        for item in tree[key[:-2]]:
            _drop(item, rest)
    elif not rest:
        tree.pop(key, None)
    else:
        _drop(tree[key], rest)


def _with_defaults(model: BaseModel, keys: list[list[str]]) -> Any:
    """A copy of `model` with the fields at `keys` (dotted paths, split) set to their defaults."""
    updates = {}
    for name in dict.fromkeys(key[0] for key in keys):
        if name not in type(model).model_fields:
            raise KeyError(f"at_default: {type(model).__name__} has no field {name!r}")
        inner = [key[1:] for key in keys if key[0] == name]
        updates[name] = type(model).model_fields[name].get_default(call_default_factory=True) if [] in inner \
            else _with_defaults(getattr(model, name), inner)
    return model.model_copy(update=updates)


def hash_json(value: Any) -> str:
    """A short, stable hash of a JSON-able value (keys sorted): a stage's fingerprint."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]

