"""`embeddings.head_init` left unset stays unset, whatever the order of the edits (review s19 R2).

Its default depends on the tokenizer road (`recipe.embeddings.default_head_init`): a recipe that
wrote `same` into itself for every road but extend carried that `same` into an override switching
to extend, as if the user had set it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from langadapt.recipe import load_recipe
from langadapt.recipe.embeddings import default_head_init
from langadapt.recipe.schema import with_overrides

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "tiny_norwegian_warm.yaml"


def _hashed(recipe) -> object:
    """head_init as the embeddings stage's fingerprint hashes it (the recipe's full dump)."""
    return recipe.model_dump(mode="json")["embeddings"]["head_init"]


def _stage_holds(recipe) -> object:
    """head_init in the embeddings stage's slice, as the pipeline builds it when it runs."""
    from langadapt.pipeline.stages import stage_table

    return next(stage for stage in stage_table(recipe) if stage.name == "embeddings").run.slice.config.head_init


def test_an_override_to_the_extension_gets_the_extensions_default() -> None:
    loaded = load_recipe(RECIPE)
    assert loaded.recipe.tokenizer.kind == "inherit" and _hashed(loaded.recipe) == "same"
    extended, tree = with_overrides(loaded.recipe, ["tokenizer.kind=extend"])
    assert "head_init" not in extended.embeddings.model_fields_set and "head_init" not in tree.get("embeddings", {})
    assert extended.embeddings.head_init is None  # the base's tie decides: mean_of_base_head when untied
    assert default_head_init(extends_base=True, tied=False) == "mean_of_base_head"
    # the same recipe as `--set tokenizer.kind=extend` given when it loads: the same fingerprint
    direct = load_recipe(RECIPE, ["tokenizer.kind=extend"]).recipe
    assert extended.model_dump(mode="json")["embeddings"] == direct.model_dump(mode="json")["embeddings"]


def test_a_library_edit_of_the_road_resolves_the_default_again() -> None:
    recipe = load_recipe(RECIPE).recipe
    recipe.tokenizer.kind = "extend"
    assert recipe.embeddings.head_init is None and _hashed(recipe) is None
    assert _stage_holds(recipe) is None  # the embeddings stage decides from the base
    recipe.tokenizer.kind = "keep_base"
    assert _hashed(recipe) == "same" and _stage_holds(recipe) == "same"


@pytest.mark.parametrize("order", [["embeddings.head_init=same", "tokenizer.kind=extend"],
                                   ["tokenizer.kind=extend", "embeddings.head_init=same"]])
def test_head_init_set_to_same_stays_same_on_the_extension(order: list[str]) -> None:
    loaded = load_recipe(RECIPE, order)
    assert loaded.recipe.embeddings.head_init == "same" and _hashed(loaded.recipe) == "same"
    set_first = load_recipe(RECIPE, ["embeddings.head_init=same"]).recipe
    extended, _ = with_overrides(set_first, ["tokenizer.kind=extend"])
    assert extended.embeddings.head_init == "same" and "head_init" in extended.embeddings.model_fields_set
