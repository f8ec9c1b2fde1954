"""The embeddings stage inside a run directory: inputs found, artifacts standard and standalone."""

from __future__ import annotations

import json

import pytest
from test_embeddings_support import EN_TEXT, NB_TEXT, byte_level_tokenizer, tiny_model
from transformers import AutoModelForCausalLM, AutoTokenizer

from langadapt.data.documents import write_documents
from langadapt.embeddings import EmbeddingConfig
from langadapt.embeddings.stage import run
from langadapt.errors import LangadaptError
from langadapt.recipe.embeddings import EmbeddingsSlice
from langadapt.run.context import StageContext


def _docs(texts, lang, role):
    return iter(
        {"id": f"{lang}{i}", "text": t, "lang": lang, "source": f"{lang}.demo", "role": role}
        for i, t in enumerate(texts)
    )


@pytest.fixture()
def ctx(tmp_path) -> StageContext:
    old_tok, new_tok = byte_level_tokenizer(EN_TEXT), byte_level_tokenizer(NB_TEXT, vocab_size=420)
    base = tmp_path / "base"
    tiny_model("llama", len(old_tok), tied=False).save_pretrained(base)
    old_tok.save_pretrained(base)
    run_dir = tmp_path / "runs" / "demo"
    new_tok.save_pretrained(run_dir / "tokenizer" / "tokenizer")
    write_documents(run_dir / "data" / "train" / "nb.demo.jsonl.gz", _docs(NB_TEXT, "nb", "target"))
    write_documents(run_dir / "data" / "train" / "en.demo.jsonl.gz", _docs(EN_TEXT, "en", "replay"))
    (run_dir / "embeddings").mkdir(parents=True)
    return StageContext(run_dir=run_dir, stage="embeddings", seed=0, base_model=str(base))


def test_stage_writes_a_standalone_model_folder_mapping_and_report(ctx):
    summary = run(EmbeddingsSlice(EmbeddingConfig()), ctx)
    folder = ctx.out / "model"
    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert len(tokenizer) == 420 == model.config.vocab_size == model.get_input_embeddings().weight.shape[0]
    assert (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()
    assert model.config.bos_token_id == tokenizer.bos_token_id
    report = json.loads((ctx.out / "report.json").read_text())
    mapping = json.loads((ctx.out / "mapping.json").read_text())
    assert report["mapping"] == mapping["summary"] and len(mapping["tokens"]) == 420
    assert summary["method"] == "mean" and summary["new_vocab"] == 420
    assert summary["copied"] + summary["decomposed"] + summary["special"] + summary["fallback"] == 420


def test_stage_feeds_only_target_language_text_to_corpus_methods(ctx):
    run(EmbeddingsSlice(EmbeddingConfig(method="align")), ctx)
    report = json.loads((ctx.out / "report.json").read_text())
    nb_mb = sum(len(t.encode("utf-8")) for t in NB_TEXT) / 1e6
    assert report["align"]["corpus_mb"] == pytest.approx(nb_mb, abs=1e-3)  # the English replay is not read


def test_stage_says_which_input_is_missing(ctx, tmp_path):
    no_base = StageContext(run_dir=ctx.run_dir, stage="embeddings", seed=0, base_model=None)
    with pytest.raises(LangadaptError, match=r"base model folder \(base_model.path\)"):  # the recipe's key
        run(EmbeddingsSlice(EmbeddingConfig()), no_base)
    other = StageContext(
        run_dir=tmp_path / "runs" / "empty", stage="embeddings", seed=0, base_model=ctx.base_model
    )
    with pytest.raises(LangadaptError, match="tokenizer stage"):
        run(EmbeddingsSlice(EmbeddingConfig()), other)
