"""Every recipe field is read by the code it configures: no dead knobs.

A field counts as read when its name is used outside the classes that declare settings (pydantic
models, in `recipe/schema.py`, `recipe/data.py`, `runtime/sbatch.py`'s `SbatchConfig`, ..., where
fields are declared and validated): as an attribute (`config.seq_len`)
or as a string (`getattr(config, "seq_len")`, a dumped dict's `"seq_len"`). The check is by name,
so it cannot tell two fields of one name apart; it catches a field that nothing reads at all (the
way `data.num_workers` was declared and documented, and never passed to the encoder).
"""

from __future__ import annotations

import ast
import typing
from pathlib import Path

from pydantic import BaseModel

from langadapt.recipe import Recipe

PACKAGE = Path(__file__).resolve().parents[2] / "langadapt"

ALLOWED_UNREAD: dict[str, str] = {
    "evaluation.cold_baseline": "read through Recipe.wants_cold_twin (recipe/schema.py), the one answer the "
                                "pipeline, the dry run and the cold twin use; the name check at load needs it too",
}
"""Fields read only inside recipe/, with the reason."""


def schema_fields(model: type[BaseModel], prefix: str = "", above: tuple[type, ...] = ()) -> list[tuple[str, str]]:
    """(dotted path, field name) of every field of `model` and the models inside it (a list's or a
    mapping's items under the list's name: `data.sources.weight`)."""
    fields = []
    for name, info in model.model_fields.items():
        fields.append((prefix + name, name))
        for inner in _models(info.annotation):
            if inner not in above:  # a model inside itself would never end
                fields += schema_fields(inner, f"{prefix}{name}.", (*above, model))
    return fields


def _models(annotation: object) -> list[type[BaseModel]]:
    found = [annotation] if isinstance(annotation, type) and issubclass(annotation, BaseModel) else []
    for arg in typing.get_args(annotation):
        found += _models(arg)
    return found


def declares_settings(node: ast.AST) -> bool:
    """Whether `node` is a pydantic model's class (deriving from `Config` or `BaseModel`)."""
    return isinstance(node, ast.ClassDef) and any(ast.unparse(base).split(".")[-1] in ("Config", "BaseModel")
                                                  for base in node.bases)


def names_in(node: ast.AST) -> set[str]:
    """Attribute names and string constants under `node`, skipping settings classes (where a field's
    declaration and its validators name it without reading it for the stage it configures)."""
    if declares_settings(node):
        return set()
    names = {node.attr} if isinstance(node, ast.Attribute) else set()
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        names.add(node.value)
    for child in ast.iter_child_nodes(node):
        names |= names_in(child)
    return names


def names_used() -> set[str]:
    return set().union(*(names_in(ast.parse(path.read_text(encoding="utf-8"))) for path in PACKAGE.rglob("*.py")))


def test_every_recipe_field_is_read_outside_the_schema() -> None:
    used = names_used()
    unread = sorted(dotted for dotted, name in schema_fields(Recipe) if name not in used and dotted not in ALLOWED_UNREAD)
    assert not unread, f"recipe fields nothing reads (wire them in, remove them, or allow them with a reason): {unread}"


def test_the_allow_list_names_fields_that_exist_and_are_unread() -> None:
    fields = dict(schema_fields(Recipe))
    used = names_used()
    for dotted in ALLOWED_UNREAD:
        assert dotted in fields, f"{dotted}: no such recipe field"
        assert fields[dotted] not in used, f"{dotted} is read now: take it off ALLOWED_UNREAD"


def test_the_walk_reaches_nested_and_listed_models() -> None:
    fields = dict(schema_fields(Recipe))
    assert {"data.sources.weight", "data.cleaning.min_chars", "stage1.mixture.weight",
            "stage2.optimizer.lr", "data.sources.fetch.locale"} <= set(fields)
