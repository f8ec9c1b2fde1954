"""The tokenizer stage: train, measure against the base tokenizer, pre-tokenise the corpus.

Reads the data stage's train/valid documents and the base model folder; writes the tokenizer
(`layout.tokenizer.tokenizer`, a folder that `AutoTokenizer.from_pretrained` loads),
its metrics and their figure (base vs new, per held-out language: `layout.tokenizer.metrics`,
`fertility_plot`) and the token shards for
training (`layout.tokenizer.tokens`, via `langadapt.data.shards`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from langadapt.data.documents import iter_split, read_documents, split_files, texts_by_lang
from langadapt.errors import LangadaptError
from langadapt.recipe.tokenizer import TokenizerSlice
from langadapt.run.context import StageContext
from langadapt.tokenizer.extend import UnreachableCharacter
from langadapt.tokenizer.metrics import compare_tokenizers, plot_fertility, render_table
from langadapt.tokenizer.saving import check_written_flags, save_tokenizer
from langadapt.tokenizer.specials import specials_report
from langadapt.tokenizer.summary import specials_note
from langadapt.tokenizer.train import train_tokenizer


def run(slice_: TokenizerSlice, ctx: StageContext) -> dict[str, Any]:
    """Train (or keep) the tokenizer, write its metrics and the token shards; returns a summary."""
    from langadapt.data.shards import encode_corpus

    config, data_dir, paths = slice_.config, ctx.layout.data.root, ctx.layout.tokenizer
    base = load_base_tokenizer(ctx.base_model)
    # Without language weights the tokenizer is for the target language only: replay and
    # neighbour sources would otherwise take vocabulary away from it.
    roles = None if config.language_weights else {"target"}
    texts = ((doc["lang"], doc["text"]) for doc in iter_split(data_dir, "train", roles=roles))
    try:
        tokenizer = train_tokenizer(config, texts, base, seed=ctx.seed)
    except UnreachableCharacter as exc:
        raise LangadaptError(f"{exc} (first seen in {first_source_with(data_dir, exc.char)})") from None
    save_tokenizer(tokenizer, paths.tokenizer)
    specials = specials_report(config, base, tokenizer)
    if specials:
        ctx.log.info("tokenizer: %s", specials_note({"specials": specials})
                     or f"kept all {specials['base']:,} of the base's special tokens ({specials['decided_by']})")

    candidates = {"base": base, "new": tokenizer} if base is not None and config.kind != "keep_base" else {
        "new": tokenizer}
    metrics = {**compare_tokenizers(candidates, texts_by_lang(data_dir, "valid")), "specials": specials}
    paths.metrics.write_text(json.dumps(metrics, indent=1))
    plot_fertility(metrics, paths.fertility_plot)
    ctx.log.info("tokenizer metrics on held-out text:\n%s", render_table(metrics))

    shards = encode_corpus(tokenizer, data_dir, paths.tokens, num_workers=slice_.num_workers)
    return {
        "kind": config.kind,
        "vocab_size": len(tokenizer),
        "vocab_size_requested": config.vocab_size if config.kind != "keep_base" else len(tokenizer),
        "fertility": {name: {lang: m["fertility"] for lang, m in per.items() if "fertility" in m}
                      for name, per in metrics["tokenizers"].items()},
        "train_tokens": sum(meta["num_tokens"] for meta in shards["sources"].values()),
        "encode_workers": shards["workers"],
        "specials": specials,
    }


def first_source_with(data_dir: Path, char: str) -> str:
    """Where a character of the training sample comes from: its source, document and file."""
    for path in split_files(data_dir, "train"):
        for doc in read_documents(path):
            if char in doc["text"]:
                return f"source {doc['source']}, document {doc['id']} of {path}"
    return f"the training documents of {data_dir}"


def load_base_tokenizer(base_model: str | None) -> Any | None:
    """The base model's fast tokenizer, or None for scratch runs."""
    if base_model is None:
        return None
    from langadapt.tokenizer.loading import load_tokenizer

    base = load_tokenizer(base_model, what="base_model.path")
    check_written_flags(base_model, base)
    return base
