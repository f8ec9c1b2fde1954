"""The tokenizer stage on a small run directory: tokenizer folder, metrics, token shards."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from transformers import AutoTokenizer

from langadapt.data.documents import write_documents
from langadapt.errors import LangadaptError
from langadapt.recipe.tokenizer import TokenizerConfig, TokenizerSlice
from langadapt.run.context import StageContext
from langadapt.tokenizer.stage import run


def _run_dir(tmp_path: Path, shared_texts=None) -> Path:
    """A run directory whose data stage holds nb (target), nn (target) and en (replay) documents."""
    def docs(lang: str, role: str, texts: list[str], split: str):
        for i, text in enumerate(texts):
            yield {"id": f"{lang}-{split}-{i}", "text": text, "lang": lang, "source": f"{lang}.src", "role": role}

    if shared_texts is not None:
        corpus = {lang: (shared_texts(f"{name}.train", limit=40), shared_texts(f"{name}.valid", limit=5))
                  for lang, name in (("nb", "nb.debian-handbook"), ("nn", "nn.gimp-help"), ("en", "en.gimp-help"))}
    else:
        line = {"nb": "Vi lærer å gjøre det for hånd, slik at vi kan endre våre valg {i}.",
                "nn": "Eg har ikkje sett nokon i dag, dei var på fjellet {i}.",
                "en": "We learn to do it by hand so that we can change our choices {i}."}
        corpus = {lang: ([text.format(i=i) * 5 for i in range(60)], [text.format(i=i) for i in range(5)])
                  for lang, text in line.items()}
    data = tmp_path / "run" / "data"
    for lang, (train, valid) in corpus.items():
        role = "replay" if lang == "en" else "target"
        write_documents(data / "train" / f"{lang}.src.jsonl.gz", docs(lang, role, train, "train"))
        write_documents(data / "valid" / f"{lang}.src.jsonl.gz", docs(lang, role, valid, "valid"))
    (tmp_path / "run" / "tokenizer").mkdir()
    return tmp_path / "run"


def test_stage_trains_measures_and_encodes(tmp_path: Path, tiny_en_llama: Path, shared_texts, caplog) -> None:
    run_dir = _run_dir(tmp_path, shared_texts)
    ctx = StageContext(run_dir=run_dir, stage="tokenizer", seed=0, base_model=str(tiny_en_llama))
    with caplog.at_level(logging.INFO, logger="langadapt"):
        summary = run(TokenizerSlice(TokenizerConfig(vocab_size=2000)), ctx)
    out = run_dir / "tokenizer"
    tokenizer = AutoTokenizer.from_pretrained(out / "tokenizer")
    assert len(tokenizer) == summary["vocab_size"] <= 2000
    assert tokenizer.convert_ids_to_tokens([0, 1, 2]) == ["<s>", "</s>", "<pad>"]
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["tokenizers"]) == {"base", "new"} and metrics["languages"] == ["en", "nb", "nn"]
    assert summary["fertility"]["new"]["nb"] < summary["fertility"]["base"]["nb"]
    assert (out / "fertility.png").is_file() and "fertility" in caplog.text
    # Only target-role text trained the tokenizer: English (replay) is left to the base's strength.
    assert summary["fertility"]["new"]["en"] > summary["fertility"]["base"]["en"]
    meta = json.loads((out / "tokens" / "nb.src" / "meta.json").read_text())
    tokens = np.memmap(out / "tokens" / "nb.src" / "tokens.bin", dtype=meta["dtype"], mode="r")
    offsets = np.load(out / "tokens" / "nb.src" / "doc_offsets.npy")
    first = tokens[offsets[0]:offsets[1]].tolist()
    assert first[-1] == tokenizer.eos_token_id
    assert tokenizer.decode(first[:-1], skip_special_tokens=True) == shared_texts("nb.debian-handbook.train", 1)[0]


def test_stage_scratch_and_keep_base(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path)
    ctx = StageContext(run_dir=run_dir, stage="tokenizer", seed=0, base_model=None)
    summary = run(TokenizerSlice(TokenizerConfig(kind="byte_bpe", vocab_size=400)), ctx)
    assert set(summary["fertility"]) == {"new"} and summary["train_tokens"] > 0
    saved = AutoTokenizer.from_pretrained(run_dir / "tokenizer" / "tokenizer")
    assert saved("hei").input_ids[0] == saved.bos_token_id == 0
    with pytest.raises(LangadaptError, match="keep_base needs a base model"):
        run(TokenizerSlice(TokenizerConfig(kind="keep_base")), ctx)


def test_num_workers_sets_the_encoding_processes_not_the_shards(tmp_path: Path) -> None:
    """data.num_workers reaches the shard encoder (it was declared and never passed on)."""
    run_dir = _run_dir(tmp_path)
    ctx = StageContext(run_dir=run_dir, stage="tokenizer", seed=0, base_model=None)
    shard = run_dir / "tokenizer" / "tokens" / "nb.src" / "tokens.bin"
    default = run(TokenizerSlice(TokenizerConfig(kind="byte_bpe", vocab_size=400)), ctx)
    tokens = shard.read_bytes()
    two = run(TokenizerSlice(TokenizerConfig(kind="byte_bpe", vocab_size=400), num_workers=2), ctx)
    assert default["encode_workers"] == 1 and two["encode_workers"] == 2  # a small corpus: in-process by default
    assert shard.read_bytes() == tokens


def test_stage_keep_base_measures_and_encodes_with_the_base(tmp_path: Path, tiny_en_llama: Path) -> None:
    run_dir = _run_dir(tmp_path)
    ctx = StageContext(run_dir=run_dir, stage="tokenizer", seed=0, base_model=str(tiny_en_llama))
    summary = run(TokenizerSlice(TokenizerConfig(kind="keep_base")), ctx)
    base = AutoTokenizer.from_pretrained(tiny_en_llama)
    saved = AutoTokenizer.from_pretrained(run_dir / "tokenizer" / "tokenizer")
    assert summary["vocab_size"] == len(base) and saved.get_vocab() == base.get_vocab()
