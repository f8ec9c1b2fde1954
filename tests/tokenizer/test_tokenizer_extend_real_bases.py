"""tokenizer.kind=extend on the REAL vocabularies users bring (tests/helpers/real_bases.py):
Mistral-7B's SentencePiece BPE with byte fallback (legacy and Metaspace forms), Mistral-Nemo's
Tekken (131,072 ids, 1,000 reserved specials, ignore_merges) and GPT-2's byte-level BPE.

For each: every base id, merge, special token and byte-fallback piece stays where it was; 200
English and 200 Bokmål sentences encode to exactly the base's ids once each new token is
expanded into the base tokens it was merged from (the text is only coarsened, never split
differently); decoding gives what the base's decoding gives; Bokmål needs far fewer tokens.
"""

from __future__ import annotations

import json
import re

import pytest
from helpers.extension import expander
from helpers.real_bases import BASES, build_tokenizer_folder

from langadapt.inputs.model_folder import tokenizer_id_count
from langadapt.recipe.tokenizer import TokenizerConfig
from langadapt.tokenizer.loading import load_tokenizer
from langadapt.tokenizer.train import train_tokenizer

pytestmark = pytest.mark.slow  # five real vocabularies, one extension each: ~40 s
NEW_TOKENS = 2000


def sentences(texts: list[str], n: int = 200) -> list[str]:
    """The first `n` sentences (cut after . ! ? and at line breaks) of the documents."""
    lines = [line for text in texts for line in re.split(r"(?<=[.!?])\s+|\n+", text) if line.strip()]
    assert len(lines) >= n
    return lines[:n]


@pytest.fixture(scope="module")
def corpus(shared_texts) -> dict[str, list[str]]:
    return {"train": shared_texts("nb.debian-handbook.train"),
            "nb": sentences(shared_texts("nb.debian-handbook.valid")),
            "en": sentences(shared_texts("en.debian-handbook.valid"))}


@pytest.mark.parametrize("name", list(BASES))
def test_extension_keeps_the_base_and_only_coarsens_its_segmentation(name, corpus, shared_dir, tmp_path):
    base = load_tokenizer(build_tokenizer_folder(BASES[name], shared_dir, tmp_path / name))
    old = json.loads(base.backend_tokenizer.to_str())
    size = tokenizer_id_count(old)
    config = TokenizerConfig(kind="extend", vocab_size=size + NEW_TOKENS)
    extended = train_tokenizer(config, [("nb", t) for t in corpus["train"]], base)
    new = json.loads(extended.backend_tokenizer.to_str())

    assert len(extended) == size + NEW_TOKENS
    assert all(new["model"]["vocab"][token] == i for token, i in old["model"]["vocab"].items())
    assert new["model"]["merges"][: len(old["model"]["merges"])] == old["model"]["merges"]
    assert new["added_tokens"] == old["added_tokens"]  # special/control tokens at their ids
    assert sorted(new["model"]["vocab"].values())[size:] == list(range(size, size + NEW_TOKENS))
    if old["model"].get("byte_fallback"):  # <0x00>..<0xFF> keep their rows (3..258 in Mistral-7B)
        assert all(new["model"]["vocab"][f"<0x{b:02X}>"] == old["model"]["vocab"][f"<0x{b:02X}>"] for b in range(256))
    for role in ("bos_token_id", "eos_token_id", "unk_token_id", "pad_token_id"):
        assert getattr(extended, role) == getattr(base, role), role

    expand, tokens = expander(new, size), {}
    for lang in ("en", "nb"):
        tokens[lang] = [0, 0]
        for text in corpus[lang]:
            before, after = base.encode(text), extended.encode(text)
            assert expand(after) == before, (lang, text)
            assert extended.decode(after) == base.decode(before), (lang, text)
            tokens[lang][0] += len(before)
            tokens[lang][1] += len(after)
    assert tokens["en"][1] <= tokens["en"][0]
    assert tokens["nb"][1] < 0.9 * tokens["nb"][0], tokens  # 0.62-0.79x measured with +2,000
    if name.startswith(("nemo", "gpt2")):  # byte-level: decoding gives the text back exactly
        assert all(extended.decode(extended.encode(t, add_special_tokens=False)) == t for t in corpus["nb"])
