"""Model dimensions: published parameter counts, and transformers' own count on the meta device."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from langadapt.errors import LangadaptError
from langadapt.planning.models import BUILTIN, ModelDims, dims_from_config, load_model_dims

# Parameter counts as published on the models' cards / papers (billions, 3 significant digits).
PUBLISHED = {
    "Mistral-7B-v0.1": 7.24,
    "Llama-2-7B": 6.74,
    "Llama-3-8B": 8.03,
    "Llama-3.1-70B": 70.6,
    "Qwen2.5-7B": 7.61,
    "Gemma-2-9B": 9.24,
    "OLMo-2-7B": 7.30,
    "Mistral-Nemo-12B": 12.2,
    "NorMistral-11B": 11.4,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_builtin_models_have_their_published_size(name: str) -> None:
    assert load_model_dims(name).num_params() / 1e9 == pytest.approx(
        PUBLISHED[name], abs=0.006 * PUBLISHED[name]
    )


def test_exact_counts_of_the_reference_models() -> None:
    assert load_model_dims("Mistral-7B-v0.1").num_params() == 7_241_732_096
    assert load_model_dims("meta-llama/Llama-2-7b-hf").num_params() == 6_738_415_616
    assert load_model_dims("llama-3-8b").num_params() == 8_030_261_248


def test_embeddings_and_body_split() -> None:
    m = load_model_dims("Mistral-7B-v0.1")
    assert m.embedding_params() == 2 * 32000 * 4096  # untied: input matrix and LM head
    assert m.body_params() + m.embedding_params() == m.num_params()
    gemma = load_model_dims("Gemma-2-9B")
    assert gemma.embedding_params() == 256000 * 3584  # tied: counted once
    assert m.with_vocab(32768).embedding_params() == 2 * 32768 * 4096


HF_CONFIGS = {
    "Mistral-7B-v0.1": {
        "model_type": "mistral",
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 32000,
    },
    "Qwen2.5-7B": {
        "model_type": "qwen2",
        "hidden_size": 3584,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "intermediate_size": 18944,
        "vocab_size": 152064,
    },
    "Gemma-2-9B": {
        "model_type": "gemma2",
        "hidden_size": 3584,
        "num_hidden_layers": 42,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 256,
        "intermediate_size": 14336,
        "vocab_size": 256000,
    },
    "OLMo-2-7B": {
        "model_type": "olmo2",
        "num_key_value_heads": 32,
        "intermediate_size": 11008,
        "vocab_size": 100352,
    },
    "Mistral-Nemo-12B": {
        "model_type": "mistral",
        "hidden_size": 5120,
        "num_hidden_layers": 40,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 14336,
        "vocab_size": 131072,
    },
}


@pytest.mark.parametrize("name", sorted(HF_CONFIGS))
def test_counts_match_transformers_models_and_config_json(name: str) -> None:
    """The formula (biases, extra norms, head_dim) agrees with the real module, built without memory."""
    import torch
    import transformers

    spec = dict(HF_CONFIGS[name])
    defaults = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32}
    tied = spec.get("model_type") == "gemma2"
    config = transformers.AutoConfig.for_model(
        spec.pop("model_type"), **{**defaults, **spec, "tie_word_embeddings": tied}
    )
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    actual = sum(p.numel() for p in model.parameters())
    assert BUILTIN[name.lower()].num_params() == actual
    assert dims_from_config(config.to_dict(), name).num_params() == actual


def test_local_config_json_of_the_tiny_model(tiny_en_llama: Path) -> None:
    dims = load_model_dims(tiny_en_llama)
    assert dims == ModelDims("tiny-en-llama", 256, 6, 8, 4, 704, 8192, head_dim=32)
    import safetensors

    with safetensors.safe_open(str(tiny_en_llama / "model.safetensors"), "pt") as f:
        actual = sum(_prod(f.get_slice(k).get_shape()) for k in f.keys())  # noqa: SIM118 (safe_open has no __iter__)
    assert dims.num_params() == actual == load_model_dims("tiny-en-llama").num_params()


def _prod(shape: list[int]) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


def test_bad_model_references_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(LangadaptError, match="not in the built-in table"):
        load_model_dims("gpt-17")
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}))
    with pytest.raises(LangadaptError, match="no 'num_attention_heads'"):
        load_model_dims(tmp_path)
    (tmp_path / "config.json").write_text("{oops")
    with pytest.raises(LangadaptError, match="not valid JSON"):
        load_model_dims(tmp_path / "config.json")
