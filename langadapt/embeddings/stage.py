"""The `embeddings` pipeline stage: base model + new tokenizer -> initialised model folder.

Reads  `ctx.base_model` (HF folder), the tokenizer stage's tokenizer and, for focus/align,
       the target-language train texts of the data stage (paths from `ctx.layout`);
writes `layout.embeddings.model` (safetensors + the NEW tokenizer, loadable on its own),
       `layout.embeddings.mapping` (every new token's old pieces) and `.report` beside it, and
       `layout.embeddings.shared_rows` (the rows copied from the base: `train_rows: new` keeps them).
The surgery runs on one process on a normal float32 checkpoint (no ZeRO involved).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM

from langadapt.data.documents import iter_split
from langadapt.embeddings.mapping import build_mapping
from langadapt.embeddings.row_plan import SharedRows
from langadapt.embeddings.transfer import transfer_embeddings
from langadapt.errors import LangadaptError
from langadapt.recipe.embeddings import EmbeddingsSlice
from langadapt.run.context import StageContext
from langadapt.tokenizer.loading import load_tokenizer
from langadapt.tokenizer.saving import save_tokenizer

CORPUS_METHODS = ("focus", "align")


def _folder(path: Path | str | None, what: str) -> Path:
    if path is None or not Path(path).is_dir():
        raise LangadaptError(f"embeddings: {what} not found at {path}")
    return Path(path)


def target_texts(data_dir: Path) -> Iterator[str]:
    """Target-language training texts written by the data stage (streamed)."""
    for doc in iter_split(data_dir, "train", roles={"target"}):
        yield doc["text"]


def run(slice_: EmbeddingsSlice, ctx: StageContext) -> dict[str, Any]:
    """Initialise the base model's embeddings for the new tokenizer; returns a small summary."""
    config, paths = slice_.config, ctx.layout.embeddings
    base = _folder(ctx.base_model, "base model folder (base_model.path)")
    tokenizer_dir = _folder(ctx.layout.tokenizer.tokenizer, "the tokenizer stage's output")
    old_tokenizer = load_tokenizer(base, what="base_model.path")
    new_tokenizer = load_tokenizer(tokenizer_dir, what="the tokenizer stage's output")
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)

    corpus = None
    if config.method in CORPUS_METHODS:
        corpus = target_texts(_folder(ctx.layout.data.root, "the data stage's output"))

    ctx.log.info("embeddings: mapping %d new tokens onto %d old ones", len(new_tokenizer), len(old_tokenizer))
    mapping = build_mapping(old_tokenizer, new_tokenizer)
    ctx.out.mkdir(parents=True, exist_ok=True)
    mapping.save(
        paths.mapping,
        old_tokens=old_tokenizer.convert_ids_to_tokens(list(range(len(old_tokenizer)))),
    )
    model, report = transfer_embeddings(
        model, old_tokenizer, new_tokenizer, config, corpus=corpus, seed=ctx.seed, mapping=mapping
    )
    model_dir = paths.model
    model.save_pretrained(model_dir)
    save_tokenizer(new_tokenizer, model_dir)
    shared = SharedRows(report["new_rows"], tuple(report.pop("shared_rows")))  # a vocabulary of ids: its own file
    shared.save(paths.shared_rows)
    report["rows_copied"] = len(shared.ids)
    paths.report.write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")
    summary = {
        key: report["mapping"][key] for key in ("new_vocab", "copied", "decomposed", "special", "fallback")
    } | {"rows_copied": report["rows_copied"], "rows": report["new_rows"]}
    ctx.log.info("embeddings: %s init done: %s", config.method, summary)
    return {
        "method": config.method,
        "model": str(model_dir),
        **summary,
        "seconds": report["timings_s"]["total_s"],
    }
