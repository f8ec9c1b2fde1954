"""One test of "is this a model folder" (`inputs.model_folder.is_model_folder`), and no module
spelling it again as `(path / "config.json").is_file()` (review s19 D2: it was written eight times)."""

from __future__ import annotations

import re
from pathlib import Path

from langadapt.inputs.model_folder import is_model_folder

PACKAGE = Path(__file__).resolve().parents[2] / "langadapt"


def test_a_folder_with_config_json_is_a_model_folder_and_a_run_directory_is_not(tmp_path: Path) -> None:
    model, run = tmp_path / "model", tmp_path / "run"
    model.mkdir()
    (model / "config.json").write_text("{}", encoding="utf-8")
    (run / "stage2" / "model").mkdir(parents=True)
    (run / "recipe.resolved.yaml").write_text("name: run\n", encoding="utf-8")
    assert is_model_folder(model)
    assert not is_model_folder(run)
    assert not is_model_folder(tmp_path / "missing")
    (tmp_path / "dir_named_config" / "config.json").mkdir(parents=True)  # a folder called config.json is no config
    assert not is_model_folder(tmp_path / "dir_named_config")


def test_no_other_module_spells_the_model_folder_test() -> None:
    spelled = re.compile(r"""/ ["']config\.json["']\)\.is_file\(\)""")
    found = [f"{path.relative_to(PACKAGE)}:{number}" for path in sorted(PACKAGE.rglob("*.py"))
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if spelled.search(line)]
    assert [place.rsplit(":", 1)[0] for place in found] == ["inputs/model_folder.py"], found
