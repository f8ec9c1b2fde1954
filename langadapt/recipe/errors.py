"""Turn pydantic validation errors and YAML problems into one-line, located messages.

pydantic reports `loc=('stage2', 'lr_sheduler')`; users need
`recipes/x.yaml:14: stage2.lr_sheduler: unknown key; did you mean schedule?`. The YAML line comes
from the composed node tree (PyYAML keeps marks on nodes, not on loaded dicts), the suggestion
from the model class found by walking the schema along the same path.
"""

from __future__ import annotations

import contextlib
import difflib
import re
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from langadapt.errors import LangadaptError, dotted, key_parts
from langadapt.recipe.base import FieldProblem
from langadapt.recipe.strict_yaml import MAX_FILE_BYTES, YamlProblem, load_strict, parse_strict


def yaml_line(root: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the deepest YAML node that exists along `loc`."""
    node, line = root, None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = next(((k, v) for k, v in node.value if k.value == part), None)
            if match is None:
                break
            line, node = match[0].start_mark.line + 1, match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def read_yaml_mapping(path: Path, kind: str) -> tuple[dict[str, Any], yaml.Node | None]:
    """A YAML file as (mapping, node tree): the nodes keep line numbers for located errors.

    Every recipe and suite file is read here, through `strict_yaml.load_strict` (no duplicate keys,
    bounded size and alias expansion), so no caller can read a file more leniently than another."""
    if path.is_dir():
        raise LangadaptError(f"{path}: is a directory; give the {kind} YAML file inside it")
    if not path.is_file():
        raise LangadaptError(f"{path}: {kind} file not found")
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:  # before reading it: a stray multi-GB file is not parsed to say so
            raise LangadaptError(f"{path}: {size:,} bytes; a {kind} is at most {MAX_FILE_BYTES:,}")
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise LangadaptError(f"{path}: a {kind} must be UTF-8 text (invalid byte at offset {exc.start})") from None
    except OSError as exc:
        raise LangadaptError(f"{path}: cannot read the {kind} file: {exc.strerror or exc}") from None
    tree, root = load_strict(text, str(path))
    if not isinstance(tree, dict):
        raise LangadaptError(f"{path}: a {kind} must be a YAML mapping")
    return tree, root


def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model class that owns the last key of `loc` (for "did you mean")."""
    current: Any = model
    map_key_next = False  # the part after a dict[str, Model] field is a user's key (a source name)
    for part in loc[:-1]:
        if isinstance(part, int) or map_key_next:
            map_key_next = False
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = current.model_fields.get(part)
        if field is None:
            return None
        map_key_next = _is_mapping(field.annotation)
        current = nested_model(field.annotation)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _is_mapping(annotation: Any) -> bool:
    """dict[...] or Optional[dict[...]]: its keys are names the user chose, not schema fields."""
    if typing.get_origin(annotation) is dict:
        return True
    return any(_is_mapping(arg) for arg in typing.get_args(annotation))


def nested_model(annotation: Any) -> type[BaseModel] | None:
    """Find the BaseModel inside Optional[...] / list[...] / dict[str, ...] annotations."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = nested_model(arg)
        if found is not None:
            return found
    return None


def suggest(model: type[BaseModel], loc: tuple[Any, ...]) -> str:
    """'; did you mean X?' for an unknown key, or '' when nothing is close."""
    owner = _model_at(model, loc)
    if owner is None or not loc or not isinstance(loc[-1], str):
        return ""
    close = difflib.get_close_matches(loc[-1], list(owner.model_fields), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def format_validation_error(
    error: ValidationError, model: type[BaseModel], source: Path | str, root: yaml.Node | None,
    overrides: dict[str, str] | None = None, set_values: dict[str, str] | None = None,
) -> str:
    """One line for the most telling error (plus a count of the others).

    An unknown key comes first: a typo'd `tokenzier:` also makes `tokenizer` missing, and the
    typo is what the user must fix. A key set by `--set` is blamed on that flag (`overrides`
    maps its dotted key to the flag's text), never on a recipe line that does not contain it;
    `set_values` maps the same keys to the values as written (unshortened, for `boolean_trap`).
    """
    errors = error.errors()
    first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = tuple(p for p in first["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    problem = first.get("ctx", {}).get("error")
    if isinstance(problem, FieldProblem):  # a validator that named the key below it
        loc += problem.loc
    flag = override_for(dotted(loc), overrides or {})
    line = None if flag else yaml_line(root, loc)
    where = f"--set {flag}" if flag else (f"{source}:{line}" if line else str(source))
    if first["type"] == "extra_forbidden":
        what = "unknown key" + suggest(model, loc)
    elif first["type"] == "missing":
        what = "required key is missing"
    elif isinstance(problem, FieldProblem):
        what = str(problem)
    elif (trap := boolean_trap(first, loc, root, _written_set(dotted(loc), overrides or {}, set_values or {}))):
        what = trap
    else:
        what = first["msg"].removeprefix("Value error, ")  # pydantic's prefix for a validator's ValueError
        if "input" in first and not isinstance(first["input"], (dict, list)):
            what += f" (got {shorten(repr(first['input']))})"
    more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
    return f"{where}: {dotted(loc) or '<recipe>'}: {what}{more}"


YAML11_BOOLEAN_WORDS = ("yes", "no", "on", "off")
"""Words YAML 1.1 (PyYAML) reads as booleans when unquoted, besides true/false: `lang: no` (Norwegian)
is `False`, `name: on` is `True`."""


def scalar_at(root: yaml.Node | None, loc: tuple[Any, ...]) -> yaml.ScalarNode | None:
    """The YAML scalar node at exactly `loc` (None when the path stops short or ends elsewhere)."""
    node = root
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if k.value == part), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            return None
    return node if isinstance(node, yaml.ScalarNode) else None


def _written_set(key: str, overrides: dict[str, str], set_values: dict[str, str]) -> tuple[str, str] | None:
    """(dotted key, value as written) of the `--set` item that wrote `key`, as `override_for` finds it."""
    flag = override_for(key, overrides)
    written = next((k for k, item in reversed(list(overrides.items())) if item == flag), None)
    if flag is None or written is None:
        return None
    return written, set_values.get(written, flag.partition("=")[2])


def _set_word(loc: tuple[Any, ...], item: tuple[str, str]) -> tuple[yaml.ScalarNode | None, bool]:
    """(the scalar the `--set` item (key, value) wrote at `loc`, whether it is the item's whole value)."""
    key, raw = item
    written = key_parts(key)
    if loc[:len(written)] != written:
        return None, False
    try:
        root = parse_strict(raw, MAX_FILE_BYTES)[1]
    except YamlProblem:
        return None, False
    return scalar_at(root, loc[len(written):]), len(loc) == len(written)


def boolean_trap(error: Any, loc: tuple[Any, ...], root: yaml.Node | None,
                 set_item: tuple[str, str] | None = None) -> str | None:
    """The line for a string field that YAML 1.1 turned into a boolean, or None for any other error.

    `lang: no` (Norwegian) reaches validation as `False`, and "Input should be a valid string (got
    False)" reads as nonsense to someone who wrote `no`. When the value at `loc` is a bool that was
    written as an unquoted yes/no/on/off (in the recipe file under `root`, or in the `--set` item
    `set_item`: (dotted key, value as written)), the line names the trap and the quoting that
    fixes it. Every recipe error goes through `format_validation_error`, so every string field
    gets this, not only `lang`."""
    if error.get("type") != "string_type" or not isinstance(error.get("input"), bool) or not loc:
        return None
    node, whole = _set_word(loc, set_item) if set_item else (scalar_at(root, loc), False)
    if node is None or node.style is not None or node.value.lower() not in YAML11_BOOLEAN_WORDS:
        return None
    word, key = node.value, loc[-1]
    if whole:  # the flag's whole value: quoted for YAML inside the shell's quotes
        fix = f"""write --set '{dotted(loc)}="{word}"' (quoted)"""
    else:
        fix = f'write {key}: "{word}" (quoted)' if isinstance(key, str) else f'write "{word}" (quoted)'
    return f"got the boolean {str(error['input']).lower()}: YAML reads an unquoted no/yes/on/off as a boolean; {fix}"


def shorten(text: str, limit: int = 60) -> str:
    """`text`, or its start and its length when longer than `limit`: an error line stays one
    readable line even when the value it quotes is a 120 KB `--set` or a 300-character name."""
    return text if len(text) <= limit else f"{text[:limit - 20]}... ({len(text):,} characters)"


def set_flag(item: str) -> str:
    """How an error names a `--set key=value` item: the key whole, a long value shortened."""
    key, sep, value = item.partition("=")
    return f"{key}{sep}{shorten(value if value.isprintable() else repr(value), 40)}"


def override_for(key: str, overrides: dict[str, str]) -> str | None:
    """The `--set` item that wrote `key` (or a section above it, or a key below it), if any."""
    for written, item in reversed(list(overrides.items())):  # the last --set of a key wins
        if key == written or key.startswith(written + ".") or key.startswith(written + "[") \
                or written.startswith(key + "."):
            return item
    return None


KEYED_LINE = re.compile(r"^([a-z_][a-z0-9_]*(?:\.[a-z0-9_]+)+): (.+)$", re.DOTALL)
"""A problem line that starts with a dotted recipe key and a colon: how `Report.add_line` locates
a problem handed over as text, or raised without its `LangadaptError.key` (a fallback; an error
that carries its key is located by it, `Report.add_error`)."""


class Report:
    """Collects located problems; `raise_first` turns them into one error line."""

    def __init__(self, path: Path | str, inheritance: dict[str, list[str]], overrides: dict[str, str]) -> None:
        """`path` the recipe file, `inheritance` what stage 2 took from stage 1, `overrides` dotted key -> the --set item."""
        self.path, self.inheritance, self.overrides = path, inheritance, overrides
        try:
            self.root: yaml.Node | None = parse_strict(Path(path).read_text(encoding="utf-8"), MAX_FILE_BYTES)[1]
        except (OSError, ValueError, YamlProblem):
            self.root = None
        self.problems: list[tuple[str, str]] = []

    def add(self, loc: tuple[Any, ...], what: str) -> None:
        """One problem at recipe key `loc`; a stage-2 key inherited from stage 1 is blamed on stage 1's line."""
        key = dotted(loc)
        if len(loc) > 1 and loc[0] == "stage2" and (source := self._inherited(loc[1:])) is not None:
            key = f"{key} (inherited from stage1.{source})"
            loc = ("stage1", *loc[1:])
        flag = override_for(dotted(loc), self.overrides)
        line = None if flag else yaml_line(self.root, loc)
        where = f"--set {flag}" if flag else f"{self.path}:{line}" if line else str(self.path)
        self._append((where, f"{key}: {what}"))

    def _inherited(self, loc: tuple[Any, ...]) -> str | None:
        """The stage-1 key a stage-2 problem at `loc` (below stage2) comes from: an inherited key at
        or above it (`inherit_stage2`'s dotted keys), or `loc` itself when stage 2 inherited all that
        stage 1 wrote below it; None when stage 2 wrote it."""
        parts = [str(part) for part in loc]
        inherited = [key.split(".") for key in self.inheritance.get("inherited", [])]
        if found := next((key for key in inherited if parts[:len(key)] == key), None):
            return ".".join(found)
        overridden = [key.split(".") for key in self.inheritance.get("overridden", [])]
        below = [key for key in inherited + overridden if key[:len(parts)] == parts]
        return ".".join(parts) if below and all(key in inherited for key in below) else None

    def _append(self, problem: tuple[str, str]) -> None:
        """One problem, once: checks run per stage find a recipe-wide one (engine.*) once per stage."""
        if problem not in self.problems:
            self.problems.append(problem)

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """Run a check that may stop on its own error line: the line becomes one more problem and
        the checks after it still run, so `--dry-run` lists every problem, not the first."""
        try:
            yield
        except LangadaptError as exc:
            self.add_error(exc)

    def add_error(self, error: LangadaptError) -> None:
        """Another check's error: located by its `key` like `add`'s (the `--set` flag or the recipe
        line that wrote the key) whatever its message says; one without a key as `add_line`."""
        if error.key is not None:
            self.add(error.key, error.what)
        else:
            self.add_line(str(error))

    def add_line(self, line: str) -> None:
        """A problem that is already one line; one that starts with a dotted recipe key
        (`engine.zero_stage: ...`, `KEYED_LINE`) is located like `add`'s."""
        keyed = KEYED_LINE.match(line)
        if keyed:
            self.add(tuple(keyed[1].split(".")), keyed[2])
        else:
            self._append(("", line))

    def lines(self) -> list[str]:
        """Each problem as the one line a user reads: `file:line: key: what`."""
        return [f"{where}: {what}" if where else what for where, what in self.problems]

    def raise_first(self) -> None:
        if not self.problems:
            return
        first, more = self.lines()[0], self.problems[1:]
        tail = f" (and {len(more)} more: {', '.join(p[1].split(':')[0] for p in more)})" if more else ""
        raise LangadaptError(f"{first}{tail}")
