"""transfer_embeddings takes its tokenizers as objects or as the paths of their folders, and says
what to pass for anything else (a path used to fail deep inside with an AttributeError on str)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_embeddings_support import (
    EN_TEXT,
    NB_TEXT,
    byte_level_tokenizer,
    sentencepiece_tokenizer,
    tiny_model,
)

from langadapt.embeddings import EmbeddingConfig, transfer_embeddings
from langadapt.errors import LangadaptError


def test_tokenizer_paths_give_the_same_rows_as_the_objects(tmp_path: Path) -> None:
    old_tok, new_tok = byte_level_tokenizer(EN_TEXT), sentencepiece_tokenizer(NB_TEXT)
    old_tok.save_pretrained(tmp_path / "old")
    new_tok.save_pretrained(tmp_path / "new")
    family = "llama"
    by_object, _ = transfer_embeddings(tiny_model(family, len(old_tok), False), old_tok, new_tok,
                                       EmbeddingConfig(method="mean"))
    by_path, report = transfer_embeddings(tiny_model(family, len(old_tok), False), str(tmp_path / "old"),
                                          tmp_path / "new", EmbeddingConfig(method="mean"))
    assert report["new_rows"] == len(new_tok)
    assert torch.equal(by_path.get_input_embeddings().weight, by_object.get_input_embeddings().weight)
    with pytest.raises(LangadaptError, match="new_tokenizer is list; pass a transformers tokenizer"):
        transfer_embeddings(tiny_model(family, len(old_tok), False), old_tok, ["a", "b"], EmbeddingConfig())
    with pytest.raises(LangadaptError, match="old_tokenizer .*missing"):
        transfer_embeddings(tiny_model(family, len(old_tok), False), tmp_path / "missing", new_tok, EmbeddingConfig())
