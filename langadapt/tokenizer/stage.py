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

from langadapt.data.documents import iter_split, read_documents, split_files
from langadapt.errors import LangadaptError
from langadapt.recipe.tokenizer import TokenizerSlice
from langadapt.run.context import StageContext
from langadapt.run.timing import PartTimer
from langadapt.tokenizer.extend import UnreachableCharacter
from langadapt.tokenizer.metrics import (
    HELD_OUT_BYTES_PER_LANG,
    compare_tokenizers,
    held_out_sample,
    plot_fertility,
    render_table,
)
from langadapt.tokenizer.saving import check_written_flags, save_tokenizer
from langadapt.tokenizer.specials import specials_report
from langadapt.tokenizer.summary import specials_note
from langadapt.tokenizer.train import train_tokenizer


def run(slice_: TokenizerSlice, ctx: StageContext) -> dict[str, Any]:
    """Train (or keep) the tokenizer, write its metrics and the token shards; returns a summary.

    The summary's `parts` give wall and CPU seconds (workers included) of each part, so a slow
    stage says which part to look at."""
    from langadapt.data.shards import encode_corpus

    config, data_dir, paths, parts = slice_.config, ctx.layout.data.root, ctx.layout.tokenizer, PartTimer()
    with parts.measure("load_base"):
        base = load_base_tokenizer(ctx.base_model)
    # Without language weights the tokenizer is for the target language only: replay and
    # neighbour sources would otherwise take vocabulary away from it.
    roles = None if config.language_weights else {"target"}
    texts = ((doc["lang"], doc["text"]) for doc in iter_split(data_dir, "train", roles=roles))
    try:
        tokenizer = train_tokenizer(config, texts, base, seed=ctx.seed, num_workers=slice_.num_workers, parts=parts)
    except UnreachableCharacter as exc:
        raise LangadaptError(f"{exc} (first seen in {first_source_with(data_dir, exc.char)})") from None
    save_tokenizer(tokenizer, paths.tokenizer)
    specials = specials_report(config, base, tokenizer)
    if specials:
        ctx.log.info("tokenizer: %s", specials_note({"specials": specials})
                     or f"kept all {specials['base']:,} of the base's special tokens ({specials['decided_by']})")

    with parts.measure("metrics"):
        metrics = measure_held_out(base, tokenizer, config.kind, data_dir)
        metrics["specials"] = specials
        paths.metrics.write_text(json.dumps(metrics, indent=1))
        plot_fertility(metrics, paths.fertility_plot)
    ctx.log.info("tokenizer metrics on held-out text:\n%s", render_table(metrics))

    with parts.measure("shards"):
        shards = encode_corpus(tokenizer, data_dir, paths.tokens, num_workers=slice_.num_workers)
    return {
        "kind": config.kind,
        "vocab_size": len(tokenizer),
        "vocab_size_requested": config.vocab_size if config.kind != "keep_base" else len(tokenizer),
        "base_vocab_size": len(base) if base is not None else None,  # extend: the ids it kept, not learned
        "fertility": {name: {lang: m["fertility"] for lang, m in per.items() if "fertility" in m}
                      for name, per in metrics["tokenizers"].items()},
        "train_tokens": sum(meta["num_tokens"] for meta in shards["sources"].values()),
        "encode_workers": shards["workers"],
        "specials": specials,
        "parts": parts.as_dict(),
    }


def measure_held_out(base: Any | None, tokenizer: Any, kind: str, data_dir: Path) -> dict[str, Any]:
    """Base vs new tokenizer metrics on a bounded, deterministic sample of the held-out text.

    `held_out` in the result says how many bytes and documents of each language were measured."""
    candidates = {"base": base, "new": tokenizer} if base is not None and kind != "keep_base" else {"new": tokenizer}
    texts, measured = held_out_sample(split_files(data_dir, "valid"), read_documents)
    return {**compare_tokenizers(candidates, texts),
            "held_out": {"max_bytes_per_lang": HELD_OUT_BYTES_PER_LANG, "languages": measured}}


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
