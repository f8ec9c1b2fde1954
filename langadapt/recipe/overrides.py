"""`--set key.path=value` overrides: the dotted key (with list positions, `data.sources[1].weight`)
and its value, read as YAML by the same strict reader as recipe files. Applied to the recipe's tree
before validation (`schema.load_recipe`), so an override is checked as the file's own keys are.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from langadapt.errors import LangadaptError
from langadapt.recipe.errors import set_flag, shorten
from langadapt.recipe.strict_yaml import MAX_SET_VALUE_BYTES, YamlProblem, YamlSyntaxProblem, parse_strict

_INDEXED = re.compile(r"^(.+)\[(\d+)\]$")
_BRACKETED = re.compile(r"\[([^\]]*)\]?$|\]")
"""A key with something bracketed that `_INDEXED` did not take: a negative, empty or named index."""


def _index(digits: str) -> int:
    """A list index written in a `--set` key; any index past a billion is out of range anyway (and a
    4,000-digit one would hit Python's int-string limit)."""
    return int(digits) if len(digits) <= 9 else 10**9


def _set_dotted(tree: dict[str, Any], dotted_key: str, value: Any) -> None:
    """Set `a.b.c` (or `data.sources[1].weight`: an entry of a list the recipe has) to `value`."""
    keys = dotted_key.split(".")
    node: Any = tree
    for i, key in enumerate(keys):
        indexed = _INDEXED.match(key)
        name, index = (indexed.group(1), _index(indexed.group(2))) if indexed else (key, None)
        last = i == len(keys) - 1
        if not isinstance(node, dict):
            raise LangadaptError(f"--set {shorten(dotted_key)}: '{'.'.join(keys[:i])}' is not a section")
        if index is None and (bad := _BRACKETED.search(key)):
            raise _bad_index(dotted_key, key[:bad.start()], key[bad.start():], node.get(key[:bad.start()]))
        if index is None:
            if last:
                node[name] = value
            else:
                node = node.setdefault(name, {})
            continue
        items = node.get(name)
        if not isinstance(items, list) or index >= len(items):
            count = len(items) if isinstance(items, list) else 0
            raise LangadaptError(f"--set {shorten(dotted_key)}: {name} has {count} entr{'y' if count == 1 else 'ies'}, "
                                 f"no [{index}]")
        if last:
            items[index] = value
        else:
            node = items[index]


def _bad_index(dotted_key: str, name: str, written: str, items: Any) -> LangadaptError:
    """The error for `sources[-1]`, `sources[]` or `sources[first]`: the index is the problem, so it
    is named with the positions there are (read as a key, it would end in "unknown key; did you
    mean sources?"). Only positions counted from 0 are taken: the list a recipe inherits can grow,
    and an index from the end would then silently change which entry it sets."""
    count = len(items) if isinstance(items, list) else 0
    there = f"{name} has {count} entr{'y' if count == 1 else 'ies'}" + (f": [0] to [{count - 1}]" if count > 1 else
                                                                      ": [0]" if count == 1 else "")
    return LangadaptError(f"--set {shorten(dotted_key)}: {shorten(written)} is not a list index; write a position "
                          f"counted from 0 ({there})")


def parse_set_value(key: str, raw: str) -> Any:
    """A `--set` value as YAML (numbers, lists, bools), read by the same strict reader as recipe
    files: a duplicate key, an alias bomb or an over-long value is an error naming the flag. Text
    that is not YAML at all (`a: b: c`) stays the string it is."""
    if not raw:
        return ""
    try:
        return parse_strict(raw, MAX_SET_VALUE_BYTES)[0]
    except YamlSyntaxProblem:
        return raw
    except YamlProblem as problem:
        raise LangadaptError(f"--set {set_flag(f'{key}={raw}')}: {key}: {problem.what}") from None


def apply_overrides(tree: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `key.path=value` overrides (values parsed by `parse_set_value`)."""
    tree = copy.deepcopy(tree)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise LangadaptError(f"--set {shorten(repr(item))}: expected key.path=value")
        _set_dotted(tree, key.strip(), parse_set_value(key.strip(), raw))
    return tree
