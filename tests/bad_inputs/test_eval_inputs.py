"""What `langadapt run` refuses, `eval` and `export` refuse too, with the same checks (issue 38).

One check of a model folder (`inputs.model_folder.model_folder_problem`: files, weights from their
headers, parts against each other, a tokenizer to load), run by the base model's resolution and by
`eval`/`export` on every folder they load; one reading of an lm-eval `include_path`
(`evaluation.lm_eval_yaml.include_path_problem`, called by `load_suite`), so a task YAML that does not
parse or a data file that is missing is one line before any model loads, not "not a registered task"
or a FileNotFoundError after it. The CLI cases (exit 2, one line, no torch) are in
tests/cli/test_refusal_speed.py; these are the checks themselves, none of which loads torch.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest
from helpers.model_folders import header_model

from langadapt.errors import LangadaptError
from langadapt.evaluation import lm_eval_yaml
from langadapt.evaluation.lm_eval_yaml import include_path_problem
from langadapt.evaluation.suite import REPO_ROOT, check_suite_inputs, load_suite
from langadapt.inputs.model_folder import model_folder_problem
from langadapt.recipe import load_recipe
from langadapt.run.base_model import resolve_base_model

SHIPPED_TASKS = REPO_ROOT / "eval" / "lm_eval_tasks"
OFFLINE = ["nb_minimal_pairs_mc", "nn_minimal_pairs_mc", "en_minimal_pairs_mc"]


# --- 1. one check of a model folder ------------------------------------------------------------------

def test_a_folder_whose_parts_agree_passes(tmp_path: Path) -> None:
    assert model_folder_problem(header_model(tmp_path / "m")) is None


@pytest.mark.parametrize(("make", "flags", "problem"), [
    ({"vocab_size": 80}, {}, "m/config.json has vocab_size 80 but the weights' model.embed_tokens.weight has 64 rows"),
    ({"tokenizer_ids": 70}, {}, "m/tokenizer.json has token ids up to 69 but the weights' model.embed_tokens.weight"),
    ({"tokenizer_ids": None}, {}, ("m has no tokenizer files (tokenizer.json, tokenizer.model, tekken.json, or "
                                   "vocab.json + merges.txt)")),
    ({"tokenizer_ids": None}, {"tokenizer": False}, None),  # a folder read for its weights alone
    ({"weights": False}, {}, "m has no weights (model.safetensors or pytorch_model.bin)"),
    ({"weights": False}, {"weights": False}, None),  # a base read for its tokenizer (init: scratch)
])
def test_each_part_is_checked_where_it_is_needed(tmp_path: Path, make: dict, flags: dict, problem: str | None) -> None:
    found = model_folder_problem(header_model(tmp_path / "m", **make), **flags)
    assert found is None if problem is None else (found or "").startswith(f"{tmp_path}/{problem}"), found


def test_files_that_do_not_read_are_named(tmp_path: Path) -> None:
    folder = header_model(tmp_path / "m")
    (folder / "tokenizer.json").write_text('{"model": ', "utf-8")
    assert model_folder_problem(folder).startswith(f"{folder / 'tokenizer.json'} is not valid JSON")
    (folder / "config.json").write_text("[]", "utf-8")
    assert model_folder_problem(folder) == f"{folder / 'config.json'}: expected a JSON object"
    (folder / "config.json").unlink()
    assert model_folder_problem(folder) == f"{folder} has no config.json: not a Hugging Face model folder"
    weights = (folder / "model.safetensors").read_bytes()
    header_model(folder)
    (folder / "model.safetensors").write_bytes(weights[:-10])
    assert f"{folder / 'model.safetensors'} is truncated or corrupt" in model_folder_problem(folder)
    assert model_folder_problem(tmp_path / "none") == f"{tmp_path / 'none'}: no such model folder"


def test_a_fifo_among_the_files_is_named_not_waited_on(tmp_path: Path) -> None:
    folder = header_model(tmp_path / "m")
    os.mkfifo(folder / "generation_config.json")
    assert model_folder_problem(folder) == f"{folder / 'generation_config.json'} is not a regular file (a FIFO)"


def test_a_sentencepiece_model_alone_needs_sentencepiece(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers' own words for it are five lines ("install sentencepiece or tiktoken"), after seconds."""
    folder = header_model(tmp_path / "m", tokenizer_ids=None)
    (folder / "tokenizer.model").write_bytes(b"\n\x05hello")
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "sentencepiece" else find_spec(name, *a))
    assert model_folder_problem(folder) == (f"{folder} has only a SentencePiece tokenizer.model: pip install "
                                            "sentencepiece (or save the tokenizer as tokenizer.json)")


def _recipe(tmp_path: Path, init: str, tokenizer: str, base: Path) -> Path:
    (tmp_path / "nb.txt").write_text("Dette er en tekst.\n", "utf-8")
    path = tmp_path / f"{init}.yaml"
    path.write_text(f"name: r\nrun_root: {tmp_path}/runs\ninit: {init}\nbase_model: {{path: {base}}}\n"
                    f"data:\n  sources:\n    - {{name: nb, path: {tmp_path}/nb.txt, lang: nb}}\n"
                    f"tokenizer: {{kind: {tokenizer}, vocab_size: 300}}\n", "utf-8")
    return path


def test_the_base_model_is_resolved_through_the_same_check(tmp_path: Path) -> None:
    """`run.base_model.resolve_base_model` calls `model_folder_problem` on what the folder holds (which
    files a run needs there is the preflight check's to say, per stage): a scratch run that inherits
    the base's tokenizer needs no weights."""
    mismatch = header_model(tmp_path / "mismatch", vocab_size=80)
    with pytest.raises(LangadaptError, match=r"^base_model.path: .*mismatch/config.json has vocab_size 80 but"):
        resolve_base_model(load_recipe(_recipe(tmp_path, "warm", "inherit", mismatch)).recipe, fetch=True)
    (mismatch / "config.json").write_text("{", "utf-8")
    with pytest.raises(LangadaptError, match=r"^base_model.path: .*mismatch/config.json is not valid JSON"):
        resolve_base_model(load_recipe(_recipe(tmp_path, "warm", "inherit", mismatch)).recipe, fetch=True)
    tokenizer_only = header_model(tmp_path / "tokenizer_only", weights=False)
    recipe = load_recipe(_recipe(tmp_path, "scratch", "inherit", tokenizer_only)).recipe
    assert resolve_base_model(recipe, fetch=True) == str(tokenizer_only)


# --- 2. an lm-eval include_path, read as lm-eval reads it ---------------------------------------------

@pytest.fixture
def tasks(tmp_path: Path) -> Path:
    """A copy of the shipped offline tasks and their data, laid out as in eval/."""
    shutil.copytree(SHIPPED_TASKS, tmp_path / "lm_eval_tasks", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO_ROOT / "eval" / "data", tmp_path / "data")
    return tmp_path / "lm_eval_tasks"


def test_the_shipped_tasks_pass(tasks: Path) -> None:
    assert include_path_problem(SHIPPED_TASKS, OFFLINE, include_defaults=False) is None
    assert include_path_problem(tasks, ["langadapt_minimal_pairs"], include_defaults=False) is None  # their tag
    assert load_suite(REPO_ROOT / "eval" / "lm_eval_offline.yaml").tasks[0].include_path == str(SHIPPED_TASKS)


def test_a_missing_data_file_names_the_task_its_yaml_and_the_path(tasks: Path) -> None:
    """Before: the model loaded, then lm-eval's FileNotFoundError traceback from local_data.py."""
    (tasks.parent / "data" / "nn_minimal_pairs.jsonl").unlink()
    expected = (f"lm-eval task 'nn_minimal_pairs_mc' ({tasks / 'nn_minimal_pairs.yaml'}) reads data file "
                f"{tasks.parent / 'data' / 'nn_minimal_pairs.jsonl'}, which is missing")
    assert include_path_problem(tasks, OFFLINE, include_defaults=False) == expected
    assert include_path_problem(tasks, ["langadapt_minimal_pairs"], include_defaults=True) == expected  # via the tag
    assert include_path_problem(tasks, ["nb_minimal_pairs_mc"], include_defaults=False) is None  # not asked for
    suite = tasks.parent / "suite.yaml"
    suite.write_text("name: s\ntasks:\n  - kind: lm_eval\n    name: pairs\n    tasks: [nn_minimal_pairs_mc]\n"
                     "    include_path: lm_eval_tasks\n", "utf-8")
    with pytest.raises(LangadaptError) as error:
        load_suite(suite)
    assert str(error.value) == f"{suite}:3: task #1 'pairs' (lm_eval): {expected}"


def test_a_task_yaml_that_does_not_parse_is_named_with_line_and_column(tasks: Path) -> None:
    """Before: lm-eval skipped the file without a word, and its task was "not a registered task"."""
    (tasks / "nn_minimal_pairs.yaml").write_text(
        "include: _minimal_pairs_yaml\ntask: nn_minimal_pairs_mc\ndataset_kwargs:\n  data_files:\n"
        "    test: ../data/nn_minimal_pairs.jsonl\n   bad: 1\n", "utf-8")
    assert include_path_problem(tasks, ["nb_minimal_pairs_mc"], include_defaults=True) == (
        f"lm-eval task file {tasks / 'nn_minimal_pairs.yaml'}:6:4: not valid YAML (did not find expected key, "
        "while parsing a block mapping); lm-eval would skip it and not know its task")
    (tasks / "nn_minimal_pairs.yaml").write_text("task: x\nmetric: !unknown_tag 1\n", "utf-8")
    assert "nn_minimal_pairs.yaml:2:9: not valid YAML (could not determine a constructor for the tag " \
           "'!unknown_tag')" in include_path_problem(tasks, OFFLINE, include_defaults=True)


def test_an_include_that_is_missing_is_named(tasks: Path) -> None:
    (tasks / "_minimal_pairs_yaml").unlink()
    assert include_path_problem(tasks, OFFLINE, include_defaults=False) == (
        f"lm-eval task file {tasks / 'en_minimal_pairs.yaml'}: include _minimal_pairs_yaml not found "
        f"({tasks / '_minimal_pairs_yaml'}); lm-eval would skip it and not know its task")


def test_a_name_no_file_defines_is_refused_only_without_lm_evals_own_tasks(tasks: Path) -> None:
    assert include_path_problem(tasks, ["nb_minimal_pair_mc"], include_defaults=False) == (
        f"lm-eval task 'nb_minimal_pair_mc' is defined by no task YAML in {tasks} (did you mean "
        "'nb_minimal_pairs_mc'?); lm-eval's own tasks are not indexed (include_defaults: false)")
    assert include_path_problem(tasks, ["ncb"], include_defaults=True) is None  # lm-eval's index may hold it


@pytest.mark.parametrize(("files", "missing"), [
    ("{test: data.jsonl}", None),  # beside the task file
    ("[data.jsonl, more.jsonl]", "more.jsonl"),
    ("{test: 'dat*.jsonl'}", None),  # a pattern with a match
    ("{test: 'none*.jsonl'}", "none*.jsonl"),
    ("{test: 'https://example.org/x.jsonl'}", None),  # a URL is the loader's to fetch
    ("{test: [data.jsonl, /nonexistent/abs.jsonl]}", "/nonexistent/abs.jsonl"),
])
def test_data_files_of_a_packaged_loader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: str,
                                         missing: str | None) -> None:
    """`dataset_path: json` reads relative files from the working directory: a file there, or beside
    the task file, passes; the one found nowhere is named."""
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "data.jsonl").write_text('{"text": "a"}\n', "utf-8")
    (folder / "t.yaml").write_text(f"task: t\ndataset_path: json\ndataset_kwargs:\n  data_files: {files}\n", "utf-8")
    found = include_path_problem(folder, ["t"], include_defaults=False)
    if missing is None:
        assert found is None
    else:
        assert found is not None and found.endswith(f"reads data file {tmp_path / missing if missing[0] != '/' else missing}, "
                                                    "which is missing"), found


def test_a_custom_loader_reads_beside_its_module(tmp_path: Path) -> None:
    """`custom_dataset: !function sub.loader.read`: relative files are looked for beside sub/loader.py."""
    folder = tmp_path / "tasks"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "here.jsonl").write_text("{}\n", "utf-8")
    (folder / "t.yaml").write_text("task: t\ncustom_dataset: !function sub.loader.read\n"
                                   "dataset_kwargs: {data_files: {test: here.jsonl, other: gone.jsonl}}\n", "utf-8")
    assert include_path_problem(folder, ["t"], include_defaults=False) == (
        f"lm-eval task 't' ({folder / 't.yaml'}) reads data file {folder / 'sub' / 'gone.jsonl'}, which is missing")


def test_groups_and_folders_lm_eval_skips(tmp_path: Path) -> None:
    folder = tmp_path / "tasks"
    (folder / "__pycache__").mkdir(parents=True)
    (folder / "__pycache__" / "broken.yaml").write_text("[", "utf-8")  # lm-eval does not look there
    (folder / "empty.yaml").write_text("", "utf-8")  # not a mapping: skipped by both
    (folder / "g.yaml").write_text("group: g\ntask: [t, {task: u}]\n", "utf-8")
    (folder / "t.yaml").write_text("task: t\ndataset_path: ./nowhere\n", "utf-8")
    (folder / "u.yaml").write_text("task: u\ndataset_path: json\n", "utf-8")
    assert lm_eval_yaml.task_index(folder).keys() == {"g", "t", "u"}
    assert include_path_problem(folder, ["u"], include_defaults=False) is None
    assert "lm-eval task 't'" in include_path_problem(folder, ["g"], include_defaults=False)


# --- 3. what a suite's tasks read, before torch ---------------------------------------------------------

def test_check_suite_inputs_reads_pairs_and_finds_lm_eval(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"good": "a", "bad": "b"}) + "\n{oops\n", "utf-8")
    suite = tmp_path / "s.yaml"
    suite.write_text(f"name: s\ntasks:\n  - {{kind: minimal_pairs, lang: nb, path: {pairs}}}\n", "utf-8")
    with pytest.raises(LangadaptError, match=r"pairs.jsonl:2: malformed JSON"):
        check_suite_inputs(load_suite(suite))
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "lm_eval" else find_spec(name, *a))
    offline = load_suite(REPO_ROOT / "eval" / "lm_eval_offline.yaml")
    with pytest.raises(LangadaptError) as error:
        check_suite_inputs(offline)
    assert str(error.value) == (f"{offline.source}: task 'minimal_pairs': lm-eval tasks need lm-evaluation-harness, "
                                "which is not installed; run: pip install 'langadapt[eval]'")
