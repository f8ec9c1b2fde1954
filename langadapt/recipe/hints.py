"""The commands langadapt tells a user to run, built in one place so each one exists and does what it says.

A hint is read once, by someone stuck, and is copied into a shell as it stands. Written by hand at
each call site, hints rotted: `huggingface-cli download` after huggingface_hub 1.0 renamed it to
`hf download`, a Hub dataset fetched without the subset the recipe reads (so the offline run still
found nothing), a `--set` key the schema had lost. Here each kind of hint has one builder:

- `set_option`: `--set key=value`, the key walked down the recipe schema (list items `[0]` and
  `[]`, a mapping's user-chosen keys) and the value checked against the field's type; a hint with
  a key the schema lacks is our bug, a ValueError the tests reach;
- `hub_model_download`: `hf download REPO [--revision R]`, which fills the Hub cache that
  `snapshot_download(local_files_only=True)` (the offline run) reads;
- `hub_dataset_fetch`: the `datasets.load_dataset(...)` call the data stage makes (path, subset,
  revision, data files, split), not streamed, so it prepares the `datasets` cache an offline
  run reads (a file download into the Hub cache, `hf download --repo-type dataset`, is not read
  by `datasets` offline);
- `pip_install`: a requirement or one of our extras, shell-quoted.

tests/cli/test_hints_run.py collects every hint the tool prints, runs each external command's
`--help` and parses each `langadapt` command with the real CLI parser and each `--set` against a
real recipe. Pure string work here: no Hub, no torch; recipe/ is the lowest layer.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from langadapt.recipe.errors import _is_mapping, nested_model
from langadapt.recipe.overrides import parse_set_value

__all__ = ["hub_dataset_fetch", "hub_model_download", "pip_install", "schema_field", "set_option"]

_PART = re.compile(r"^([a-z_][a-z0-9_]*)(\[\d*\])?$")
"""One part of a dotted `--set` key: a name, optionally indexed (`sources[0]`, or `sources[]` in a
hint that means every item)."""


def schema_field(key: str, model: type[BaseModel] | None = None) -> Any:
    """The pydantic field `key` (`stage2.steps`, `data.sources[0].weight`) names in the recipe
    schema; ValueError naming the first part that is not there. Why not a recipe: a hint is built
    where no recipe is at hand (an error about a finished run), and must hold for every recipe."""
    if model is None:
        from langadapt.recipe.schema import Recipe

        model = Recipe
    current: type[BaseModel] | None = model
    field = None
    skip_name = False  # the part after a dict[str, Model] field is a name the user chose
    parts = key.split(".")
    for i, part in enumerate(parts):
        if skip_name:
            skip_name = False
            continue
        match = _PART.match(part)
        if match is None or current is None:
            raise ValueError(f"--set {key}: {'.'.join(parts[:i + 1])} is not a recipe key")
        field = current.model_fields.get(match.group(1))
        if field is None:
            raise ValueError(f"--set {key}: {'.'.join(parts[:i + 1])} is not a recipe key")
        skip_name = _is_mapping(field.annotation)
        current = nested_model(field.annotation)
    if field is None:
        raise ValueError(f"--set {key!r}: empty key")
    return field


def set_option(key: str, value: object) -> str:
    """`--set key=value` as a shell word, the key checked against the schema and the value against
    the field's type (a string as the user would type it: `--set` reads it as YAML)."""
    field = schema_field(key)
    raw = value if isinstance(value, str) else _yaml_scalar(value)
    if isinstance(value, str) and parse_set_value(key, value) != value:  # `no` is YAML's false: quote it
        raw = json.dumps(value)
    try:
        TypeAdapter(field.annotation).validate_python(parse_set_value(key, raw))
    except ValidationError as exc:
        raise ValueError(f"--set {key}={raw}: not a valid value ({exc.errors()[0]['msg']})") from None
    return f"--set {shlex.quote(f'{key}={raw}')}"


def _yaml_scalar(value: object) -> str:
    """How YAML writes a Python value on one line: true/false, numbers as they print, null."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)


def hub_model_download(repo_id: str, revision: str | None = None) -> str:
    """`hf download REPO [--revision R]`: the whole model repository into the Hub cache of the
    HF_HOME it runs under, where `snapshot_download(..., local_files_only=True)` finds it."""
    words = ["hf", "download", repo_id]
    if revision:
        words += ["--revision", revision]
    return shlex.join(words)


def hub_dataset_fetch(path: str, subset: str | None = None, revision: str | None = None,
                      data_files: str | list[str] | dict[str, Any] | None = None,
                      split: str | None = None) -> str:
    """`python -c "import datasets; datasets.load_dataset(...)"` with the arguments the reader
    passes (CulturaX without `'no'` fetches nothing the Norwegian source can read), not streamed,
    so `datasets` prepares the cache its offline mode reads."""
    args = [json.dumps(path)]  # JSON's double quotes: the shell's single quotes then wrap the code cleanly
    if subset:
        args.append(json.dumps(subset))
    keywords = {"revision": revision, "data_files": data_files, "split": split}
    args += [f"{name}={json.dumps(value)}" for name, value in keywords.items() if value is not None]
    code = f"import datasets; datasets.load_dataset({', '.join(args)})"
    return shlex.join(["python", "-c", code])


def pip_install(*requirements: str) -> str:
    """`pip install ...` with each requirement quoted for the shell (`'langadapt[eval]'`: brackets
    are globs to zsh and bash alike)."""
    return shlex.join(["pip", "install", *requirements])
