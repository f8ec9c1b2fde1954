"""The evaluate stage's print hashes the files its suites read, found as the suite loader finds
them (`suite.suite_inputs`, built on `load_suite`): the suite file through the checkout fallback,
each task's data files relative to the suite's folder, an lm_eval `include_path` folder as lm-eval
indexes it. Names do not depend on the working directory, so the print is the same from anywhere."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from langadapt.evaluation.suite import REPO_ROOT, load_suite, suite_inputs
from langadapt.pipeline.stages import stage_table
from langadapt.recipe import load_recipe
from langadapt.run.fingerprint import fingerprints

DEMO = REPO_ROOT / "recipes" / "tiny_norwegian_warm.yaml"


def test_a_suite_names_its_data_files_relative_to_its_folder_from_any_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO_ROOT)
    here = suite_inputs(["eval/multilingual.yaml"])
    monkeypatch.chdir(tmp_path)  # eval/multilingual.yaml is found through the checkout fallback
    elsewhere = suite_inputs(["eval/multilingual.yaml"])
    assert [name for name, _ in elsewhere] == [name for name, _ in here]
    assert [path.resolve() for _, path in elsewhere] == [(REPO_ROOT / path).resolve() for _, path in here]
    names = [name for name, _ in here]
    assert names == ["eval/multilingual.yaml", "eval/multilingual.yaml:data/en_minimal_pairs.jsonl",
                     "eval/multilingual.yaml:data/translation_nb_en.jsonl"]
    suite = load_suite(REPO_ROOT / "eval/multilingual.yaml")  # the loader's own resolution: the same files
    assert {Path(t.path) for t in suite.tasks if hasattr(t, "path")} == {path for _, path in here[1:]}


def test_evaluates_print_is_the_same_from_another_working_directory(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    def prints() -> dict[str, str]:
        loaded = load_recipe(DEMO, [f"run_root={tmp_path / 'runs'}"])
        return fingerprints(loaded, stage_table(loaded.recipe), base_model="")

    monkeypatch.chdir(REPO_ROOT)
    from_checkout = prints()
    monkeypatch.chdir(tmp_path)
    assert prints() == from_checkout


def test_editing_a_suites_data_file_moves_evaluates_print_alone(tmp_path: Path) -> None:
    shutil.copytree(REPO_ROOT / "eval" / "data", tmp_path / "data")
    shutil.copy(REPO_ROOT / "eval" / "multilingual.yaml", tmp_path / "multilingual.yaml")

    def prints() -> dict[str, str]:
        loaded = load_recipe(DEMO, [f"run_root={tmp_path / 'runs'}", f"evaluation.suites=[{tmp_path / 'multilingual.yaml'}]"])
        return fingerprints(loaded, stage_table(loaded.recipe), base_model="")

    before = prints()
    pairs = tmp_path / "data" / "en_minimal_pairs.jsonl"
    pairs.write_text(pairs.read_text(encoding="utf-8").replace("The", "A", 1), encoding="utf-8")
    after = prints()
    assert [name for name in before if after[name] != before[name]] == ["evaluate", "export"]


def test_an_include_path_counts_what_lm_eval_indexes_not_its_caches(tmp_path: Path) -> None:
    shutil.copytree(REPO_ROOT / "eval" / "data", tmp_path / "data")
    shutil.copytree(REPO_ROOT / "eval" / "lm_eval_tasks", tmp_path / "lm_eval_tasks",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO_ROOT / "eval" / "lm_eval_offline.yaml", tmp_path / "suite.yaml")
    before = suite_inputs([str(tmp_path / "suite.yaml")])
    assert f"{tmp_path / 'suite.yaml'}:lm_eval_tasks/nb_minimal_pairs.yaml" in dict(before)
    (tmp_path / "lm_eval_tasks" / "__pycache__").mkdir()
    (tmp_path / "lm_eval_tasks" / "__pycache__" / "local_data.cpython-311.pyc").write_bytes(b"\0")
    assert suite_inputs([str(tmp_path / "suite.yaml")]) == before


def test_a_suite_that_does_not_load_counts_its_own_file(tmp_path: Path) -> None:
    """The run's preflight refuses it before evaluate runs; the print must still be computable (for
    `--until data`, which does not check suites)."""
    suite = tmp_path / "suite.yaml"
    suite.write_text("name: s\ntasks:\n  - {kind: minimal_pairs, lang: nb, path: missing.jsonl}\n")
    assert suite_inputs([str(suite)]) == ((str(suite), suite),)


def test_editing_an_lm_eval_tasks_data_file_outside_its_include_path_moves_evaluates_print(tmp_path: Path) -> None:
    """The shipped lm-eval tasks read ../data/*.jsonl (`dataset_kwargs.data_files`), outside the
    include_path folder: the print hashes those files too, so an edited pairs file re-runs evaluate."""
    shutil.copytree(REPO_ROOT / "eval" / "data", tmp_path / "data")
    shutil.copytree(REPO_ROOT / "eval" / "lm_eval_tasks", tmp_path / "lm_eval_tasks",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO_ROOT / "eval" / "lm_eval_offline.yaml", tmp_path / "suite.yaml")
    named = dict(suite_inputs([str(tmp_path / "suite.yaml")]))
    pairs = tmp_path / "data" / "nb_minimal_pairs.jsonl"
    assert named[f"{tmp_path / 'suite.yaml'}:data/nb_minimal_pairs.jsonl"] == pairs
    assert f"{tmp_path / 'suite.yaml'}:data/translation_nb_en.jsonl" not in named  # no named task reads it

    def prints() -> dict[str, str]:
        loaded = load_recipe(DEMO, [f"run_root={tmp_path / 'runs'}", f"evaluation.suites=[{tmp_path / 'suite.yaml'}]"])
        return fingerprints(loaded, stage_table(loaded.recipe), base_model="")

    before = prints()
    pairs.write_text(pairs.read_text(encoding="utf-8").replace("er", "var", 1), encoding="utf-8")
    after = prints()
    assert [name for name in before if after[name] != before[name]] == ["evaluate", "export"]
