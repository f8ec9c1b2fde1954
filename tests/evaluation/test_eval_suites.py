"""Suite loading and bad input: every shipped suite validates; each user mistake is one located line."""

from __future__ import annotations

import builtins
import json
from pathlib import Path

import pytest

from langadapt.errors import LangadaptError
from langadapt.evaluation import EvaluationConfig, load_suite
from langadapt.evaluation.preparation import plan_suites
from langadapt.evaluation.suite import REPO_ROOT, BpbTask, MinimalPairsTask, load_suites
from langadapt.evaluation.task_data import cap_bytes, read_minimal_pairs, read_texts
from langadapt.recipe import load_recipe

SHIPPED = sorted((REPO_ROOT / "eval").glob("*.yaml"))


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_suite_validates_and_its_data_exists(path):
    suite = load_suite(path)
    assert suite.tasks and suite.name == path.stem
    for task in suite.tasks:
        if isinstance(task, MinimalPairsTask):
            assert len(read_minimal_pairs(task.path)) >= 20


def test_default_suites_split_target_from_source_and_neighbours():
    mono, multi = load_suites(EvaluationConfig().suites)
    bpb = {s.name: next(t for t in s.tasks if isinstance(t, BpbTask)).langs for s in (mono, multi)}
    assert bpb == {"monolingual": ["nb", "nn"], "multilingual": ["en", "sv", "da", "fi", "code"]}
    assert {t.kind for t in mono.tasks} == {"bpb", "tokenizer_metrics", "minimal_pairs", "generate"}


def test_shipped_recipes_name_suites_that_load():
    for recipe in sorted((REPO_ROOT / "recipes").glob("*.yaml")):
        load_suites(load_recipe(recipe).recipe.evaluation.suites)


def test_minimal_pair_data_is_well_formed():
    for path in sorted((REPO_ROOT / "eval" / "data").glob("*_minimal_pairs.jsonl")):
        pairs = read_minimal_pairs(path)
        assert all(good != bad and good.strip() and bad.strip() for good, bad in pairs), path
        assert len(set(pairs)) == len(pairs), path


def test_unknown_task_kind_names_suite_line_and_task(tmp_path):
    suite = write(
        tmp_path / "s.yaml",
        "name: s\ntasks:\n  - {kind: bpb, langs: [nb]}\n  - kind: perplexityy\n    name: oops\n",
    )
    with pytest.raises(LangadaptError) as err:
        load_suite(suite)
    message = str(err.value)
    assert (
        message.startswith(f"{suite}:4: task #2 'oops': unknown task kind 'perplexityy'")
        and "\n" not in message
    )
    assert "minimal_pairs" in message  # lists the valid kinds


def test_unknown_key_suggests_the_right_one(tmp_path):
    suite = write(tmp_path / "s.yaml", "name: s\ntasks:\n  - kind: bpb\n    lang: [nb]\n")
    with pytest.raises(
        LangadaptError, match=r"s.yaml:4: task #1 \(bpb\): lang: unknown key; did you mean langs\?"
    ):
        load_suite(suite)


def test_missing_data_file_names_suite_and_task(tmp_path):
    suite = write(
        tmp_path / "s.yaml",
        "name: s\ntasks:\n  - {kind: minimal_pairs, name: nb_pairs, lang: nb, path: nope.jsonl}\n",
    )
    with pytest.raises(LangadaptError) as err:
        load_suite(suite)
    assert (
        str(err.value)
        == f"{suite}:3: task #1 'nb_pairs' (minimal_pairs): data file not found: {tmp_path / 'nope.jsonl'}"
    )


def test_missing_suite_and_malformed_yaml(tmp_path):
    with pytest.raises(LangadaptError, match="suite file not found"):
        load_suite(tmp_path / "absent.yaml")
    with pytest.raises(LangadaptError, match=r"bad.yaml:3: malformed YAML: expected the node content"):
        load_suite(write(tmp_path / "bad.yaml", "name: s\ntasks: [\n"))
    with pytest.raises(LangadaptError, match="needs a `kind:`"):
        load_suite(write(tmp_path / "nokind.yaml", "tasks:\n  - {langs: [nb]}\n"))


def test_malformed_minimal_pairs_line_gives_file_and_line(tmp_path):
    good = json.dumps({"good": "Jeg har en bil.", "bad": "Jeg har et bil."})
    broken = write(tmp_path / "pairs.jsonl", good + "\n\n" + '{"good": "Hun leser", "bad": \n')
    with pytest.raises(LangadaptError) as err:
        read_minimal_pairs(broken)
    assert str(err.value).startswith(f"{broken}:3: malformed JSON")
    missing = write(tmp_path / "keys.jsonl", good + "\n" + json.dumps({"good": "x", "wrong": "y"}) + "\n")
    with pytest.raises(LangadaptError, match=rf"{missing}:2: expected an object with string key\(s\) bad"):
        read_minimal_pairs(missing)


def test_malformed_pairs_fail_while_planning_before_any_model(tmp_path):
    pairs = write(tmp_path / "p.jsonl", "not json\n")
    suite = write(
        tmp_path / "s.yaml", f"name: s\ntasks:\n  - {{kind: minimal_pairs, lang: nb, path: {pairs}}}\n"
    )
    with pytest.raises(LangadaptError, match=r"p.jsonl:1: malformed JSON"):
        plan_suites([load_suite(suite)], {}, EvaluationConfig())


def test_lm_eval_task_without_lm_eval_gives_the_install_hint(tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_lm_eval(name, *args, **kwargs):
        if name == "lm_eval" or name.startswith("lm_eval."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_lm_eval)
    suite = write(tmp_path / "s.yaml", "name: s\ntasks:\n  - {kind: lm_eval, name: nor, tasks: [ncb]}\n")
    with pytest.raises(LangadaptError) as err:
        plan_suites([load_suite(suite)], {}, EvaluationConfig())
    message = str(err.value)
    assert "pip install 'langadapt[eval]'" in message and "'nor'" in message and "\n" not in message


def test_plan_reads_files_caps_bytes_and_notes_missing_languages(tmp_path):
    docs = write(
        tmp_path / "docs.jsonl", "".join(json.dumps({"text": t}) + "\n" for t in ["æøå " * 50, "abc " * 50])
    )
    plain = write(tmp_path / "code.py", "def f():\n    return 1\n")
    suite = write(
        tmp_path / "s.yaml",
        "name: s\ntasks:\n  - kind: bpb\n    langs: [nb, sv]\n"
        f"    files: {{xx: [{docs.name}], code: [{plain.name}]}}\n"
        "  - {kind: tokenizer_metrics, langs: [nb, xx]}\n",
    )
    plan = plan_suites(
        [load_suite(suite)], {"nb": ["Hei på deg. " * 100]}, EvaluationConfig(max_bytes_per_lang=301)
    )
    assert plan.suites["s"]["langs"] == ["nb", "xx", "code"]
    assert sum(len(t.encode()) for t in plan.texts["xx"]) <= 301 and plan.texts["code"] == [plain.read_text()]
    assert plan.tokenizer_langs == ["nb", "xx"]
    assert plan.notes == ["s/bpb: no held-out text for 'sv' in the run's data; skipped"]


def test_cap_bytes_cuts_on_a_character_boundary():
    assert cap_bytes(["ab", "cd"], None) == ["ab", "cd"]
    assert cap_bytes(["ab", "cd"], 3) == ["ab", "c"]
    assert cap_bytes(["åå"], 3) == ["å"]  # 'å' is 2 bytes: the half character is dropped
    assert read_texts([]) == []


def test_config_rejects_stride_above_window():
    with pytest.raises(ValueError, match="stride"):
        EvaluationConfig(window=64, stride=128)
    assert EvaluationConfig(window=64).effective_stride == 64
