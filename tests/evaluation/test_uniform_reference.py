"""The uniform-prediction line (issue 40): what a model that gives every token the same probability
scores, stored per tokenizer in results.json and said under the report's bits-per-byte table."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from langadapt.evaluation.evaluate import evaluate_models
from langadapt.evaluation.render import build_blocks
from langadapt.evaluation.suite import load_suites
from langadapt.recipe.evaluation import EvaluationConfig


@pytest.fixture()
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_a_model_that_predicts_every_token_alike_scores_the_uniform_line(tiny_en_llama, shared_texts, tmp_path,
                                                                         one_thread):
    tokenizer = AutoTokenizer.from_pretrained(tiny_en_llama)
    model = AutoModelForCausalLM.from_pretrained(tiny_en_llama, dtype=torch.float32).eval()
    uniform = AutoModelForCausalLM.from_pretrained(tiny_en_llama, dtype=torch.float32).eval()
    with torch.no_grad():
        uniform.get_output_embeddings().weight.zero_()  # every logit 0: p = 1/V for every token
    suite = tmp_path / "bpb.yaml"
    suite.write_text("name: t\ndescription: d\ntasks:\n  - {kind: bpb, name: bpb, langs: [nb, en]}\n")
    texts = {"nb": [t[:600] for t in shared_texts("nb.debian-handbook.valid", 2)],
             "en": [t[:600] for t in shared_texts("en.debian-handbook.valid", 2)]}
    models = {"base": (model, tokenizer), "flat": (uniform, tokenizer)}
    results = evaluate_models(models, load_suites([str(suite)]), texts, EvaluationConfig(window=128, device="cpu"))

    line = results["uniform"]["base"]
    assert line["vocab"] == len(tokenizer) and line["models"] == ["base", "flat"]
    for lang in ("nb", "en"):
        scored = results["models"]["flat"][lang]
        assert scored["bits_per_byte"] == pytest.approx(line["bits_per_byte"][lang], rel=1e-5)
        per_token = math.log2(len(tokenizer))  # bits of a uniform choice among V tokens
        assert line["bits_per_byte"][lang] == pytest.approx(per_token * scored["tokens"] / scored["bytes"])
        assert results["models"]["base"][lang]["bits_per_byte"] < line["bits_per_byte"][lang]  # trained: below
    said = [text for kind, *rest in build_blocks(results, "t", set()) if kind == "p" for text in rest
            if isinstance(text, str) and text.startswith("Uniform prediction")]
    assert len(said) == 1 and f"nb {line['bits_per_byte']['nb']:.3f}" in said[0]
