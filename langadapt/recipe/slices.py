"""What a stage's slice holds of the recipe, declared field by field: its fingerprint's recipe part.

Every field of a slice (`DataSlice`, `TrainingSlice`, ...) is made with `reads(...)`, naming the
recipe keys it holds as `run.fingerprint.section_hash` takes them (sections, dotted keys,
`data.sources[].weight` for a key of every list item; `{name}` for the slice's own `name`, a
training stage's section) and those it leaves out (`ignores`: read by nobody downstream, or only
deciding whether the stage refuses; `at_default`: left out after finished runs had hashed them, so
hashed at their default). A field that holds no key says `why`. `recipe_keys` collects
them, so the pipeline fingerprints exactly what a slice carries and keeps no list by hand;
`tests/pipeline/test_slice_keys.py` checks each declaration against the recipe it was built from.
"""

from __future__ import annotations

from dataclasses import MISSING, Field, field, fields
from typing import Any, NamedTuple


def reads(*keys: str, ignores: tuple[str, ...] = (), at_default: tuple[str, ...] = (), why: str | None = None,
          default: Any = MISSING) -> Any:
    """A slice field holding the recipe's `keys` (less `ignores`); `at_default`: fields of them the
    stage does not read but finished runs' prints hashed, hashed at their default value
    (`run.fingerprint.recipe_hash`: dropping them would re-run every finished run); `why` when it
    holds no key."""
    if not keys and not why:
        raise TypeError("a slice field that holds no recipe key says why")
    metadata = {"reads": keys, "ignores": ignores, "at_default": at_default, "why": why}
    return field(metadata=metadata) if default is MISSING else field(default=default, metadata=metadata)


class Declared(NamedTuple):
    """One slice field and the recipe keys it declares (`{name}` filled in)."""

    field: Field[Any]
    reads: tuple[str, ...]
    ignores: tuple[str, ...]
    at_default: tuple[str, ...]


class RecipeKeys(NamedTuple):
    """A stage's fingerprint's recipe part (`run.fingerprint.section_hash`, `run.fingerprint.recipe_hash`)."""

    sections: tuple[str, ...]
    ignores: tuple[str, ...]
    at_default: tuple[str, ...]


def declared(slice_: Any) -> list[Declared]:
    """Each field of a slice with the keys it reads, ignores and hashes at their default."""
    name = getattr(slice_, "name", "")
    rows = []
    for one in fields(slice_):
        if "reads" not in one.metadata:
            raise TypeError(f"{type(slice_).__name__}.{one.name}: not declared with recipe.slices.reads")
        rows.append(Declared(one, *(tuple(k.format(name=name) for k in one.metadata[part])
                                    for part in ("reads", "ignores", "at_default"))))
    return rows


def recipe_keys(slice_: Any, *context: str) -> RecipeKeys:
    """(sections, ignores, at_default) of a stage's fingerprint: its slice's fields' keys plus
    `context`, what the stage reads besides its slice (the base model folder through
    `ctx.base_model`). A key inside another one (`base_model.architecture` beside `base_model`) is
    left out: it adds nothing."""
    rows = declared(slice_)
    keys = [*context, *(k for row in rows for k in row.reads)]
    sections = tuple(dict.fromkeys(k for k in keys if not any(_inside(k, other) for other in keys)))
    return RecipeKeys(sections, tuple(dict.fromkeys(k for row in rows for k in row.ignores)),
                      tuple(dict.fromkeys(k for row in rows for k in row.at_default)))


def _inside(key: str, other: str) -> bool:
    """`key` is a part of `other` (and not `other` itself)."""
    parts, outer = key.replace("[]", "").split("."), other.replace("[]", "").split(".")
    return len(outer) < len(parts) and parts[: len(outer)] == outer
