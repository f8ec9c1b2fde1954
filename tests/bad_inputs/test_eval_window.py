"""The evaluation window a model's context length caps (issue 23): the report states the window used,
not the one asked for, and a log line says it was capped. A two-layer random Llama, no shared data."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from langadapt.evaluation.render import build_blocks
from langadapt.evaluation.suite import load_suites
from langadapt.recipe.evaluation import EvaluationConfig

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from langadapt.evaluation.evaluate import evaluate_models  # imports torch

TEXTS = ["Debian er et operativsystem som mange bruker. " * 8, "For å installere en pakke må du skrive. " * 8]


def tiny_model(positions: int) -> tuple[object, object]:
    """A random Llama with `positions` positions and a byte-level tokenizer trained on TEXTS."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.train_from_iterator(TEXTS, trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, bos_token="<s>", eos_token="</s>")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=positions)
    return LlamaForCausalLM(config).eval(), tok


@pytest.fixture()
def suite(tmp_path: Path) -> list:
    path = tmp_path / "suite.yaml"
    path.write_text("name: s\ntasks:\n  - {kind: bpb, name: heldout_bpb, langs: [nb]}\n")
    return load_suites([path])


def test_a_capped_window_is_the_one_reported_and_logged(suite: list, caplog) -> None:
    config = EvaluationConfig(window=64, device="cpu")
    with caplog.at_level(logging.WARNING, logger="langadapt"):
        results = evaluate_models({"short": tiny_model(32)}, suite, {"nb": TEXTS}, config)
    assert results["windows"] == {"short": {"window": 32, "stride": 32}}
    assert (results["meta"]["window"], results["meta"]["stride"], results["meta"]["window_requested"]) == (32, 32, 64)
    assert ("evaluation: short scored with a 32-token window, its context length (evaluation.window asks 64); "
            "the report states 32") in caplog.text
    heading = build_blocks(results, "t", set())[1][1]
    assert "Window 32 tokens (evaluation.window asks 64; capped at the model's context length), stride 32." in heading


def test_models_with_different_caps_each_say_theirs(suite: list, caplog) -> None:
    config = EvaluationConfig(window=64, device="cpu")
    results = evaluate_models({"short": tiny_model(32), "long": tiny_model(128)}, suite, {"nb": TEXTS}, config)
    assert results["meta"]["window"] == "32 (short), 64 (long)"


def test_an_uncapped_window_is_stated_as_asked(suite: list, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="langadapt"):
        results = evaluate_models({"long": tiny_model(128)}, suite, {"nb": TEXTS}, EvaluationConfig(window=64, device="cpu"))
    assert results["meta"]["window"] == 64 and "capped" not in caplog.text
    assert "Window 64 tokens, stride 64." in build_blocks(results, "t", set())[1][1]
