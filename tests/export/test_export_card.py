"""Every model card says how to use the model: a snippet that loads it with plain transformers (from
export.repo_id when set, else the exported folder) and generates from the prompt the export was checked with."""

from __future__ import annotations

import ast
from pathlib import Path

from langadapt.export.card import Exported, build_card
from langadapt.export.provenance import RunFacts
from langadapt.recipe.export import ExportConfig
from langadapt.run.layout import RunLayout

FACTS = RunFacts(init="warm", base_hub_id=None, base_label="base", target_languages=("nb",), sources=())


def how_to_use(card: str) -> str:
    section = card[card.index("## How to use"):card.index("## Gain and forgetting")]
    return section[section.index("```python\n") + len("```python\n"):section.rindex("```")]


def test_the_card_loads_the_repo_id_when_set_else_the_folder_and_generates(tmp_path: Path) -> None:
    exported = Exported("adapted", ("stage2",), {"prompt": 'Oslo er "hovedstaden"'}, {}, "model")
    pushed = how_to_use(str(build_card(RunLayout(tmp_path / "run"), FACTS,
                                       ExportConfig(repo_id="my-org/nb-warm"), exported)))
    ast.parse(pushed)  # the snippet is Python as it stands, quotes in the prompt included
    assert 'AutoTokenizer.from_pretrained("my-org/nb-warm")' in pushed
    assert 'AutoModelForCausalLM.from_pretrained("my-org/nb-warm")' in pushed
    assert 'tokenizer("Oslo er \\"hovedstaden\\"", return_tensors="pt")' in pushed
    assert "model.generate(**inputs" in pushed
    local = how_to_use(str(build_card(RunLayout(tmp_path / "run"), FACTS, ExportConfig(), exported)))
    assert 'AutoModelForCausalLM.from_pretrained("model")' in local and "my-org" not in local
    card = str(build_card(RunLayout(tmp_path / "run"), FACTS, ExportConfig(), exported))
    assert 'tokenizer.padding_side = "left"' in card  # the right padding it ships with is said, with the fix
