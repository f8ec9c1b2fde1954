"""A fetched source's licence note appears only once the data stage has fetched it: a first run's card
must still list it, and the copyleft guard must still stop the run before training (issue 38)."""

from __future__ import annotations

from pathlib import Path

import pytest

from langadapt.errors import LangadaptError
from langadapt.export.provenance import RunFacts
from langadapt.pipeline.stages import stage_table
from langadapt.recipe.schema import load_recipe
from tests.helpers.recipes import scratch_recipe


def _recipe(tmp_path: Path, *overrides: str):
    path = tmp_path / "r.yaml"
    path.write_text(scratch_recipe(tmp_path, "lic", source="nb.jsonl"))
    return load_recipe(path, list(overrides)).recipe


def test_licences_are_read_when_the_card_asks_not_when_the_recipe_is_read(tmp_path: Path) -> None:
    facts = RunFacts.from_recipe(_recipe(tmp_path))  # before the source (and its note) exists
    (tmp_path / "nb.jsonl").write_text('{"text": "tekst"}\n')
    (tmp_path / "nb.jsonl.LICENSE.txt").write_text("nb.jsonl: a fetched corpus\n  licence: CC-BY-SA-3.0\n")
    assert facts.sources[0].licences == ("CC-BY-SA-3.0",)
    assert facts.sources[0].restrictive_licences == ["CC-BY-SA-3.0"]


def test_the_licence_guard_runs_again_once_the_data_stage_has_fetched(tmp_path: Path) -> None:
    data = stage_table(_recipe(tmp_path))[0]
    assert data.name == "data" and data.check_after is not None
    everything = [stage.name for stage in stage_table(_recipe(tmp_path))]
    data.check_after(everything)  # no note yet: nothing to say
    (tmp_path / "nb.jsonl.LICENSE.txt").write_text("licence: GFDL-1.2\n")
    with pytest.raises(LangadaptError, match=r"^export.license: .*source nb \(GFDL-1.2\)"):
        data.check_after(everything)
    data.check_after([name for name in everything if name != "export"])  # not exporting: not asked
    stage_table(_recipe(tmp_path, "export.license=gfdl"))[0].check_after(everything)  # chosen: passes
