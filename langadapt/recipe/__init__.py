"""The recipe: one validated schema for every knob of a run (`schema`), the base class every stage's
config slice derives from (`base`), located error messages (`errors`), `--set` overrides
(`overrides`) and the generated field reference (`reference`).

`from langadapt.recipe import Recipe, load_recipe` works as before; names resolve lazily because the
schema imports every stage's config, and those import `recipe.base` (an eager import here would
be a circle).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_HOME = {"apply_overrides": "overrides"}
"""Names that live outside `schema` (every other name of `__all__` does)."""
__all__ = ["BaseModelConfig", "ClusterConfig", "LoadedRecipe", "Recipe", "apply_overrides", "inherit_stage2", "load_recipe",
           "with_overrides"]

if TYPE_CHECKING:
    from langadapt.recipe.overrides import apply_overrides
    from langadapt.recipe.schema import (
        BaseModelConfig,
        ClusterConfig,
        LoadedRecipe,
        Recipe,
        inherit_stage2,
        load_recipe,
        with_overrides,
    )


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'langadapt.recipe' has no attribute {name!r}")
    return getattr(import_module(f"langadapt.recipe.{_HOME.get(name, 'schema')}"), name)
