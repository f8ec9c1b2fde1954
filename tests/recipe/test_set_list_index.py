"""A `--set` key whose list index is not a position from 0 is refused naming the index (issue 38:
`data.sources[-1].lang=nb` said "unknown key; did you mean sources?", blaming the name)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.cli import run_cli

from langadapt.errors import LangadaptError
from langadapt.recipe.overrides import apply_overrides

TREE = {"data": {"sources": [{"lang": "nb"}, {"lang": "nn"}, {"lang": "sv"}]}}


@pytest.mark.parametrize("key, written", [
    ("data.sources[-1].lang", "[-1]"),
    ("data.sources[].lang", "[]"),
    ("data.sources[last].lang", "[last]"),
    ("data.sources[1", "[1"),
])
def test_the_index_is_named_with_the_positions_there_are(key: str, written: str) -> None:
    with pytest.raises(LangadaptError) as error:
        apply_overrides(TREE, [f"{key}=da"])
    assert str(error.value) == (f"--set {key}: {written} is not a list index; write a position counted from 0 "
                                "(sources has 3 entries: [0] to [2])")
    assert "unknown key" not in str(error.value)


def test_a_position_from_0_still_sets_its_entry() -> None:
    assert apply_overrides(TREE, ["data.sources[2].lang=da"])["data"]["sources"][2] == {"lang": "da"}


def test_the_cli_refuses_it_in_one_line(tmp_path: Path) -> None:
    corpus = tmp_path / "nb.txt"
    corpus.write_text("Dette er en setning.\n")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"name: idx\nrun_root: {tmp_path}/runs\ninit: scratch\n"
                      f"data:\n  sources:\n    - {{name: nb, path: {corpus}, lang: nb}}\n")
    result = run_cli("run", str(recipe), "--set", "data.sources[-1].lang=nn", "--dry-run")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "langadapt: error: --set data.sources[-1].lang: [-1] is not a list index; write a position counted "
        "from 0 (sources has 1 entry: [0])"]
