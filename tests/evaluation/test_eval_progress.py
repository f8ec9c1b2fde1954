"""Evaluation says where it is (issue 38, "evaluation is silent"): one line per model x task in
logs, a bar on a terminal, each with the task's headline number as results.json stores it; and the
minimal-pairs accuracy carries lm-eval's standard error. Two-layer random Llamas, no shared data."""

from __future__ import annotations

import json
import logging
import math
import re
from pathlib import Path

import pytest

from langadapt.evaluation.report import write_report
from langadapt.evaluation.suite import load_suites
from langadapt.evaluation.tables import task_rows
from langadapt.recipe.evaluation import EvaluationConfig

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from langadapt.evaluation.evaluate import evaluate_models  # these two import torch
from langadapt.evaluation.tasks import accuracy_stderr

NB = ["Debian er et operativsystem som mange bruker. " * 4, "For å installere en pakke må du skrive. " * 4]
EN = ["Debian is an operating system many people use. " * 4, "To install a package you must type. " * 4]
PAIRS = [("Hunden sover.", "Hunden sove."), ("Vi bor her.", "Vi bo her."), ("Det regner.", "Det regne."),
         ("Jeg ser deg.", "Jeg se deg.")]
LINE = re.compile(r"evaluate: model (\d+)/(\d+) (\S+), task (\d+)/(\d+) (\S+) \(([^)]*)\): (.*) in ([\d.]+) s$")


def tiny_model(seed: int) -> tuple[object, object]:
    """A random one-layer Llama with a byte-level tokenizer trained on the texts."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.train_from_iterator(NB + EN, trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>"],
                                                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, bos_token="<s>", eos_token="</s>")
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128)
    return LlamaForCausalLM(config).eval(), tok


@pytest.fixture()
def suites(tmp_path: Path) -> list:
    (tmp_path / "pairs.jsonl").write_text(
        "".join(json.dumps({"good": g, "bad": b}) + "\n" for g, b in PAIRS), encoding="utf-8")
    path = tmp_path / "suite.yaml"
    path.write_text("name: s\ntasks:\n  - {kind: bpb, langs: [nb, en]}\n"
                    "  - {kind: minimal_pairs, name: pairs, lang: nb, path: pairs.jsonl}\n")
    return load_suites([path])


def _evaluate(suites: list) -> dict:
    models = {"base": tiny_model(0), "adapted": tiny_model(1)}
    return evaluate_models(models, suites, {"nb": NB, "en": EN}, EvaluationConfig(window=64, device="cpu"))


@pytest.mark.slow  # over 2 s: not in the fast tier (tests/durations.json not yet refreshed)
def test_a_line_per_model_and_task_in_order_with_the_numbers_of_results_json(
        suites: list, tmp_path: Path, caplog, monkeypatch) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "0")  # as in a Slurm log, whatever runs the tests
    with caplog.at_level(logging.INFO, logger="langadapt"):
        results = _evaluate(suites)
    write_report(results, tmp_path / "out", title="t")
    saved = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    lines = [m.groups() for m in map(LINE.search, caplog.messages) if m]
    expected = [(str(i + 1), "2", model, str(j + 1), "3", task, lang)
                for i, model in enumerate(["base", "adapted"])
                for j, (task, lang) in enumerate([("bpb", "nb"), ("bpb", "en"), ("s/pairs", "nb")])]
    assert [line[:7] for line in lines] == expected
    for _, _, model, _, _, task, lang, headline, seconds in lines:
        assert float(seconds) >= 0
        if task == "bpb":
            assert headline == f"bits_per_byte {saved['models'][model][lang]['bits_per_byte']:.4f}"
        else:
            pairs = saved["tasks"]["s/pairs"][model]
            assert headline == (f"accuracy {pairs['accuracy']:.4f} ± {pairs['accuracy_stderr']:.4f} "
                                f"(n={len(PAIRS)})")
    loaded = [m for m in caplog.messages if " loaded in " in m]
    assert [m.split(" loaded in ")[0] for m in loaded] == ["evaluate: model 1/2 base", "evaluate: model 2/2 adapted"]


def test_on_a_terminal_a_bar_and_the_same_lines_above_it(suites: list, caplog, capsys, monkeypatch) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    with caplog.at_level(logging.INFO, logger="langadapt"):
        _evaluate(suites)
    err = capsys.readouterr().err
    assert [m.groups()[:3] for m in map(LINE.search, err.splitlines()) if m][-1] == ("2", "2", "adapted")
    assert len([line for line in err.splitlines() if LINE.search(line)]) == 6
    assert not any(LINE.search(m) for m in caplog.messages)  # printed above the bar, not logged twice


def test_accuracy_stderr_is_lm_evals_acc_stderr() -> None:
    # 3 of 4 right: sqrt(0.75 * 0.25 / 3) = 0.25 exactly (lm-eval's sample-stddev form, n - 1)
    assert accuracy_stderr(0.75, 4) == pytest.approx(0.25)
    assert accuracy_stderr(0.5, 101) == pytest.approx(0.05)
    assert accuracy_stderr(1.0, 10) == 0.0 and accuracy_stderr(1.0, 1) is None
    with pytest.raises(ValueError, match="not in"):
        accuracy_stderr(1.5, 10)
    metrics = pytest.importorskip("lm_eval.api.metrics")
    scores = [1] * 37 + [0] * 26
    assert accuracy_stderr(37 / 63, 63) == pytest.approx(metrics.mean_stderr(scores))


def test_the_report_shows_the_stderr_beside_the_accuracy_and_no_delta_of_it(suites: list, monkeypatch) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "0")
    results = _evaluate(suites)
    header, rows = task_rows(results)
    row = next(r for r in rows if r[0].startswith("s/pairs"))
    pairs = results["tasks"]["s/pairs"]["adapted"]
    assert row[1] == "accuracy ↑" and row[header.index("adapted")] == (
        f"{pairs['accuracy']:.3f} ± {pairs['accuracy_stderr']:.3f}")
    assert not any("_stderr" in r[1] for r in rows)
    assert "accuracy_stderr" not in results["task_deltas"]["s/pairs"]["adapted"]
    assert math.isfinite(results["task_deltas"]["s/pairs"]["adapted"]["accuracy"])
