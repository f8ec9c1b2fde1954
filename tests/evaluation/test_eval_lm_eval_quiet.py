"""lm-eval through `langadapt eval` without its console noise: no progress bars, no notices about
how we call it, while its real warnings still show and every setting is put back afterwards."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from helpers.synthetic import tiny_llama
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from langadapt.evaluation.lm_eval_bridge import quiet_harness, run_lm_eval
from langadapt.evaluation.suite import REPO_ROOT, load_suite
from langadapt.recipe.evaluation import EvaluationConfig

pytest.importorskip("lm_eval")

TEXT = "Dette er en kort tekst på norsk bokmål om Debian og pakker, og den er ikke lang. " * 3


def test_bars_and_expected_notices_are_off_inside_and_back_after(caplog) -> None:
    import datasets
    import lm_eval.api.task
    import lm_eval.evaluator
    from tqdm import tqdm

    git_probe = lm_eval.evaluator.get_git_commit_hash
    datasets.enable_progress_bars()
    with caplog.at_level(logging.WARNING), quiet_harness():
        assert lm_eval.api.task.tqdm(range(3)).disable  # the per-task bar lm-eval has no switch for
        assert not datasets.utils.logging.is_progress_bar_enabled()
        assert lm_eval.evaluator.get_git_commit_hash() is None  # no `git describe` on the console
        task_log = logging.getLogger("lm_eval.api.task")
        task_log.warning("nb_pairs: Custom kwargs can be passed to `--metadata` in console (as json string)")
        task_log.warning("nb_pairs: 3 documents have no gold answer")  # a real problem
    assert [r.getMessage() for r in caplog.records if r.name.startswith("lm_eval")] == [
        "nb_pairs: 3 documents have no gold answer"]
    assert lm_eval.api.task.tqdm is tqdm and lm_eval.evaluator.get_git_commit_hash is git_probe
    assert datasets.utils.logging.is_progress_bar_enabled()
    logging.getLogger("lm_eval.api.task").warning("nb_pairs: Custom kwargs can be passed again")
    assert "Custom kwargs can be passed again" in caplog.text  # the filter is gone too


def test_the_shipped_offline_tasks_run_without_a_bar_on_the_console(tmp_path: Path, monkeypatch, capfd) -> None:
    """The console stays clean through a whole lm-eval call (bars go to stderr, by file descriptor)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)  # not a git checkout: lm-eval's git probe would print "fatal: ..."
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.train_from_iterator([TEXT] * 5, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="</s>")
    (task,) = load_suite(REPO_ROOT / "eval" / "lm_eval_offline.yaml").tasks
    capfd.readouterr()
    scores = run_lm_eval(tiny_llama(len(tok), seed=1).eval(), tok, task, EvaluationConfig(window=64))
    err = capfd.readouterr().err
    assert set(scores) == {"nb_minimal_pairs_mc", "nn_minimal_pairs_mc", "en_minimal_pairs_mc"}
    for noise in ("it/s", "%|", "pretrained", "Custom kwargs", "num_fewshot", "fatal"):
        assert noise not in err, f"{noise!r} on the console:\n{err}"
