"""The one YAML reader for everything a user writes: recipe and suite files, and `--set` values.

PyYAML's `safe_load` accepts YAML that means something other than what the user sees, and some
that never finishes meaning anything:

* a key written twice keeps the last one: a second `stage2:` block silently replaces the first;
* aliases expand without bound: a "billion laughs" (nine anchors of ten aliases each) under a
  free-form key such as `engine.deepspeed_config` loads instantly as shared references, then
  hangs every deepcopy, validation and dump that walks it;
* a 5,000-digit integer hits Python's int-string conversion limit as a traceback, and a
  100,000-deep `[[[...` as a RecursionError.

`load_strict` refuses each of these with one located line, before anything is built from the
document. It is a `SafeLoader` (no arbitrary objects), so everything else is PyYAML's own parser.
"""

from __future__ import annotations

from typing import Any

import yaml

from langadapt.errors import LangadaptError

MAX_FILE_BYTES = 1_000_000
"""A recipe or suite file: real ones are a few KB; anything near this is not a hand-written recipe."""
MAX_SET_VALUE_BYTES = 10_000
"""One `--set key=value` value (a DeepSpeed config inline is well under 1 KB)."""
MAX_NODES = 100_000
"""Nodes of a document with every alias expanded: what validation and deepcopy will really walk."""
MAX_DEPTH = 64
"""Nesting depth of a document (recipes nest about 5 levels; DeepSpeed configs about 4)."""
MAX_NUMBER_CHARS = 64
"""Longest number literal: far past any real step count or rate, far below int-string limits."""

_MERGE_TAG = "tag:yaml.org,2002:merge"


class YamlProblem(Exception):
    """What is wrong with a document and on which line (1-based; None when it has no line)."""

    def __init__(self, what: str, line: int | None = None) -> None:
        super().__init__(what)
        self.what, self.line = what, line


class YamlSyntaxProblem(YamlProblem):
    """Text that is not YAML at all (a `--set` value like `a: b: c` is then taken as a plain string)."""


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys and number literals too long to mean a number."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """Refuse a key that the same mapping already has (merge keys `<<` may be overridden: that
        is what they are for), naming both lines."""
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=False)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable (complex) key: SafeLoader refuses it below
                continue
            if first is not None:
                raise YamlProblem(f"{key}: duplicate key (first at line {first})", _line(key_node))
            seen[key] = _line(key_node)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        _check_number_length(node)
        return super().construct_yaml_int(node)

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        _check_number_length(node)
        return super().construct_yaml_float(node)


StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)
StrictLoader.add_constructor("tag:yaml.org,2002:float", StrictLoader.construct_yaml_float)


def _check_number_length(node: yaml.ScalarNode) -> None:
    if len(node.value) > MAX_NUMBER_CHARS:
        raise YamlProblem(f"a number of {len(node.value):,} characters; at most {MAX_NUMBER_CHARS} "
                          "(quote it if it is meant as text)", _line(node))


def _check_expansion(root: yaml.Node) -> None:
    """Refuse a document whose alias-expanded size or depth is past the bounds, or whose aliases
    refer to themselves. Sizes are memoised per node, so a billion laughs costs a few hundred steps."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node, depth: int) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        if depth > MAX_DEPTH:
            raise YamlProblem(f"nested more than {MAX_DEPTH} levels deep", _line(node))
        if id(node) in open_nodes:
            raise YamlProblem("an alias refers to a node that contains it (a recursive structure)", _line(node))
        open_nodes.add(id(node))
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        total = 1
        for child in children:
            total += size(child, depth + 1)
            if total > MAX_NODES:
                raise YamlProblem(f"expands to more than {MAX_NODES:,} values (aliases of aliases?)", _line(node))
        open_nodes.discard(id(node))
        sizes[id(node)] = total
        return total

    size(root, 0)


def _problem_line(exc: yaml.YAMLError) -> int | None:
    mark = getattr(exc, "problem_mark", None)
    return mark.line + 1 if mark is not None else None


def parse_strict(text: str, max_bytes: int) -> tuple[Any, yaml.Node | None]:
    """(value, node tree) of one YAML document, or YamlProblem. The node tree keeps line numbers."""
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise YamlProblem(f"{size:,} bytes; at most {max_bytes:,}")
    try:
        loader = StrictLoader(text)  # the reader refuses non-printable characters here
    except yaml.reader.ReaderError as exc:
        raise YamlSyntaxProblem(f"malformed YAML: character {exc.character:#06x} is not allowed (a control "
                                "character)", text.count("\n", 0, exc.position) + 1) from None
    try:
        root = loader.get_single_node()
        if root is None:
            return None, None
        _check_expansion(root)
        return loader.construct_document(root), root
    except yaml.YAMLError as exc:
        raise YamlSyntaxProblem(f"malformed YAML: {getattr(exc, 'problem', None) or exc}", _problem_line(exc)) from None
    except RecursionError:
        raise YamlProblem(f"nested more than {MAX_DEPTH} levels deep") from None
    except (ValueError, OverflowError) as exc:  # a scalar its resolver matched but cannot build: 2024-13-45
        raise YamlProblem(f"cannot read a value: {exc}") from None
    finally:
        loader.dispose()


def load_strict(text: str, source: str, max_bytes: int = MAX_FILE_BYTES) -> tuple[Any, yaml.Node | None]:
    """`parse_strict` with any problem as one LangadaptError line located at `source:line`."""
    try:
        return parse_strict(text, max_bytes)
    except YamlProblem as problem:
        where = f"{source}:{problem.line}" if problem.line else source
        raise LangadaptError(f"{where}: {problem.what}") from None
