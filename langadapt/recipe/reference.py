"""The recipe explained by its own schema: every field's type, default and docstring.

`langadapt run RECIPE --explain` prints a resolved recipe annotated this way, and
`langadapt reference` prints the Markdown reference that the README includes, so the
documentation cannot drift from the code.
"""

from __future__ import annotations

import re
import typing
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from langadapt.recipe.errors import nested_model


def _without_annotated(text: str) -> str:
    """`Annotated[str, AfterValidator(...)]` -> `str`: the reference shows the type a user writes,
    not the validators and bounds attached to it (those are in the meaning column or the errors)."""
    while (start := text.find("Annotated[")) >= 0:
        depth, first_end, i = 0, None, start + len("Annotated[")
        for i in range(start + len("Annotated["), len(text)):
            if text[i] in "[(":
                depth += 1
            elif text[i] in ")]":
                if depth == 0:
                    break
                depth -= 1
            elif text[i] == "," and depth == 0 and first_end is None:
                first_end = i
        text = text[:start] + text[start + len("Annotated["):first_end or i] + text[i + 1:]
    return text


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    text = _without_annotated(text or str(annotation).replace("typing.", "").replace("NoneType", "None"))
    return re.sub(r"\b(?:[a-z_]+\.)+(?=[A-Z])", "", text)  # langadapt.recipe.train.MixtureEntry -> MixtureEntry


def reference_rows(model: type[BaseModel], prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(dotted key, type, default, description) for every field, nested sections expanded."""
    rows = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        nested = nested_model(field.annotation)
        default = "required" if field.default is PydanticUndefined and field.default_factory is None else (
            "" if nested else repr(field.default if field.default_factory is None else field.default_factory()))
        # a docstring wrapped over several source lines is one line here (a table cell, a `#` comment)
        description = (field.description or "").replace("\n", " ")
        rows.append((key, _type_name(field.annotation), default, description))
        if nested is not None:
            text = str(field.annotation)
            sub = f"{key}[]." if typing.get_origin(field.annotation) is list or "list[" in text else (
                f"{key}.<source>." if "dict[" in text else f"{key}.")  # dict keys are names the user picks
            rows.extend(reference_rows(nested, sub))
    return rows


def markdown_reference(model: type[BaseModel]) -> str:
    lines = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    for key, kind, default, doc in reference_rows(model):
        kind = kind.replace("|", "\\|")
        default = default.replace("|", "\\|")
        lines.append(f"| `{key}` | `{kind}` | {f'`{default}`' if default else ''} | {doc} |")
    return "\n".join(lines)


def explain(model: type[BaseModel], values: dict[str, Any]) -> str:
    """The resolved values with each field's docstring as a comment."""
    docs = {key: doc for key, _, _, doc in reference_rows(model)}
    lines: list[str] = []

    def walk(node: Any, prefix: str, indent: int) -> None:
        for key, value in node.items():
            dotted = f"{prefix}{key}"
            doc = docs.get(dotted, "")
            pad = "  " * indent
            if isinstance(value, dict) and value and dotted in docs:
                lines.append(f"{pad}{key}:{'  # ' + doc if doc else ''}")
                walk(value, dotted + ".", indent + 1)
            else:
                lines.append(f"{pad}{key}: {value!r}{'  # ' + doc if doc else ''}")

    walk(values, "", 0)
    return "\n".join(lines)
