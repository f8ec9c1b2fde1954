"""`embeddings.head_init`'s default: per road, by measurement (README "Three roads for the vocabulary").

Unset, it is `mean_of_base_head` on the extension road and `same` elsewhere, on a tied base (one
matrix) and in library calls that name no road; a value the recipe sets always wins.
"""

from __future__ import annotations

import pytest
import torch
from test_embeddings_support import EN_TEXT, NB_TEXT, byte_level_tokenizer, tiny_model

from langadapt.embeddings import EmbeddingConfig, build_mapping, transfer_embeddings
from langadapt.errors import LangadaptError
from langadapt.recipe.embeddings import HEAD_INIT_BY_ROAD, resolve_head_init


@pytest.mark.parametrize(("head_init", "road", "tied", "used"), [
    (None, "extend", False, "mean_of_base_head"),
    (None, "inherit", False, "same"),
    (None, "byte_bpe", False, "same"),
    (None, "keep_base", False, "same"),
    (None, None, False, "same"),  # a library call that names no road
    (None, "extend", True, "same"),  # a tied base: one matrix
    ("same", "extend", False, "same"),  # the recipe's own value wins
    ("zero", "inherit", False, "zero"),
    ("mean_of_base_head", "extend", True, "mean_of_base_head"),  # refused later, by the transfer
])
def test_the_default_is_per_road_and_an_explicit_value_wins(head_init, road, tied, used):
    assert resolve_head_init(head_init, road, tied) == used


def test_the_recipe_default_is_unset_and_only_extend_differs():
    assert EmbeddingConfig().head_init is None
    assert HEAD_INIT_BY_ROAD == {"extend": "mean_of_base_head"}


def test_the_transfer_uses_the_road_default_and_reports_it():
    base, new = byte_level_tokenizer(EN_TEXT), byte_level_tokenizer(NB_TEXT)
    mapping = build_mapping(base, new)
    heads, reports = {}, {}
    for name, config, road in [("extend default", EmbeddingConfig(), "extend"),
                               ("explicit", EmbeddingConfig(head_init="mean_of_base_head"), None),
                               ("inherit default", EmbeddingConfig(), "inherit"),
                               ("explicit same", EmbeddingConfig(head_init="same"), "extend")]:
        model = tiny_model("llama", len(base), tied=False)
        model, reports[name] = transfer_embeddings(model, base, new, config, mapping=mapping, seed=2, road=road)
        heads[name] = model.get_output_embeddings().weight.detach()
    assert reports["extend default"]["head_init"] == "mean_of_base_head"
    assert torch.equal(heads["extend default"], heads["explicit"])
    assert reports["inherit default"]["head_init"] == reports["explicit same"]["head_init"] == "same"
    assert torch.equal(heads["inherit default"], heads["explicit same"])
    assert not torch.equal(heads["extend default"], heads["inherit default"])


def test_a_tied_base_takes_the_default_but_refuses_an_explicit_other_head():
    base, new = byte_level_tokenizer(EN_TEXT), byte_level_tokenizer(NB_TEXT)
    _, report = transfer_embeddings(tiny_model("gpt2", len(base), tied=True), base, new, EmbeddingConfig(), road="extend")
    assert report["head_init"] == "same"
    with pytest.raises(LangadaptError, match="head_init: same"):
        transfer_embeddings(tiny_model("gpt2", len(base), tied=True), base, new,
                            EmbeddingConfig(head_init="mean_of_base_head"), road="extend")
