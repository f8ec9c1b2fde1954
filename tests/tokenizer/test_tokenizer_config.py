"""TokenizerConfig validation: errors name the key and the numbers."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from langadapt.recipe.tokenizer import TokenizerConfig


def test_defaults_inherit_the_base_tokenizer() -> None:
    config = TokenizerConfig()
    assert config.kind == "inherit"
    assert config.language_weights is None and config.max_training_chars is None
    assert config.special_tokens is None and config.split_digits is None


def test_every_field_is_documented() -> None:
    for name, field in TokenizerConfig.model_fields.items():
        assert field.description, f"TokenizerConfig.{name} has no docstring"


def test_vocab_size_not_larger_than_special_tokens_names_the_key() -> None:
    with pytest.raises(ValidationError) as err:
        TokenizerConfig(vocab_size=3, special_tokens=["<s>", "</s>", "<pad>", "<unk>", "<mask>"])
    error = err.value.errors()[0]
    assert error["loc"] == ("vocab_size",)
    assert "vocab_size=3" in error["msg"] and "5 special" in error["msg"]


def test_unknown_key_and_bad_values_are_rejected() -> None:
    with pytest.raises(ValidationError, match="vocab_sise"):
        TokenizerConfig(vocab_sise=8000)
    with pytest.raises(ValidationError, match="language_weights"):
        TokenizerConfig(language_weights={"nb": -1.0})
    with pytest.raises(ValidationError, match="positive weight"):
        TokenizerConfig(language_weights={"nb": 0.0})
    with pytest.raises(ValidationError, match="max_training_chars=0"):
        TokenizerConfig(max_training_chars=0)
    with pytest.raises(ValidationError, match="kind"):
        TokenizerConfig(kind="wordpiece")


def test_roles_must_be_special_tokens() -> None:
    with pytest.raises(ValidationError, match="bos_token='<bos>'"):
        TokenizerConfig(special_tokens=["<s>", "</s>"], bos_token="<bos>")
    with pytest.raises(ValidationError, match="repeat"):
        TokenizerConfig(special_tokens=["<s>"], added_tokens=["<s>"])
    assert TokenizerConfig(special_tokens=["<s>", "</s>"], bos_token="<s>").bos_token == "<s>"
