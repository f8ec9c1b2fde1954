"""FOCUS (Dobler & de Melo 2023): new tokens as sparse combinations of overlapping tokens.

1. Tokens of the new vocabulary that exist in the old one (same bytes) are copied.
2. A fastText model (gensim, CBOW, negative 10, as in the paper) is trained on the target
   corpus tokenised with the NEW tokenizer, giving every frequent new token an auxiliary vector.
3. Every other new token's row is a sparsemax-weighted combination of the old rows of the
   overlapping tokens, weights from cosine similarities in the auxiliary space.
New tokens seen fewer than `fasttext_min_count` times have no reliable vector; the paper draws
them at random, we default to their FVT mean (`focus_rare`), which carries more information.
In an untied head those FVT rows resemble frequent source tokens' rows and take probability at
step 0: that, not the combination, is why deepfocus scored better before training
(benchmarks/README.md, embedding_init: `embeddings.head_init: mean_of_base_head` puts ours ahead).

Time is bounded twice: at most `max_corpus_mb` of text is read, and fastText training stops
once `fasttext_time_budget_s` has passed since FOCUS started (tokenising the corpus included),
even inside an epoch (the learning rate is decayed over the planned epochs, so a cut-short run
simply ends at a higher rate). At least one pass over the vocabulary is always made. fastText vectors trained
briefly on little text share a large common direction (all cosines near 0.95, so sparsemax keeps
almost every overlapping token); `focus_center_vectors` subtracts the mean vector first, which
the paper does not do but which restores a sparse, meaningful neighbourhood.
"""

from __future__ import annotations

import logging
import os
import time
import zlib

import numpy as np
import torch

from langadapt.embeddings.row_plan import PlanBuilder, PlanInputs, RowPlan, bounded_texts, mapping_rows
from langadapt.errors import LangadaptError

_CHUNK_TOKENS = 1000  # gensim silently truncates "sentences" longer than 10,000 words
_NGRAM_BUCKETS = 200_000  # gensim's default 2M buckets cost 800 MB at dim 100; tokens need far fewer
_ROWS_PER_BATCH = 1024  # similarity rows computed at once (bounds memory at 32k x 32k)
log = logging.getLogger("langadapt")


def sparsemax(z: torch.Tensor) -> torch.Tensor:
    """Sparsemax (Martins & Astudillo 2016) over the last dimension.

    Ten lines of closed form; written here rather than adding the `entmax` package for them.
    """
    z_sorted, _ = torch.sort(z, dim=-1, descending=True)
    cumsum = z_sorted.cumsum(-1) - 1
    k = torch.arange(1, z.shape[-1] + 1, dtype=z.dtype, device=z.device)
    support = (z_sorted - cumsum / k > 0).sum(-1, keepdim=True)
    tau = cumsum.gather(-1, support - 1) / support.to(z.dtype)
    return torch.clamp(z - tau, min=0)


def _stable_hash(text: str) -> int:
    """gensim seeds each word's initial vector with `hashfxn`; Python's `hash` changes per process."""
    return zlib.crc32(text.encode("utf-8"))


def _token_sentences(inputs: PlanInputs) -> tuple[list[list[str]], dict]:
    """The bounded corpus as lists of new-token strings, in chunks gensim accepts."""
    texts = bounded_texts(inputs.corpus, inputs.config.max_corpus_mb, "focus")
    names = inputs.mapping.new_tokens
    sentences: list[list[str]] = []
    tokens = 0
    for start in range(0, len(texts), 512):
        for ids in inputs.new_tokenizer(texts[start : start + 512], add_special_tokens=False)["input_ids"]:
            tokens += len(ids)
            for cut in range(0, len(ids), _CHUNK_TOKENS):
                sentences.append([names[i] for i in ids[cut : cut + _CHUNK_TOKENS]])
    megabytes = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    return sentences, {"corpus_mb": round(megabytes, 3), "corpus_tokens": tokens}


class _UntilDeadline:
    """A re-iterable corpus that stops yielding at a deadline: bounds time inside an epoch too."""

    def __init__(self, sentences: list[list[str]], deadline: float) -> None:
        self.sentences, self.deadline = sentences, deadline

    def __iter__(self):
        for i, sentence in enumerate(self.sentences):
            if i % 64 == 0 and time.perf_counter() > self.deadline:
                return
            yield sentence


def train_fasttext(sentences: list[list[str]], inputs: PlanInputs, deadline: float) -> tuple[object, dict]:
    """A gensim FastText model over token sentences, trained epoch by epoch until `deadline`."""
    from gensim.models import FastText  # optional dependency: pip install "langadapt[focus]"

    cfg = inputs.config
    start = time.perf_counter()
    model = FastText(
        vector_size=cfg.fasttext_dim,
        window=cfg.fasttext_window,
        min_count=cfg.fasttext_min_count,
        sg=0,
        negative=10,
        bucket=_NGRAM_BUCKETS,
        seed=inputs.seed,
        hashfxn=_stable_hash,
        workers=cfg.fasttext_workers or os.cpu_count() or 1,
    )
    model.build_vocab(corpus_iterable=sentences)
    if not model.wv.key_to_index:
        raise LangadaptError(
            f"embeddings.fasttext_min_count={cfg.fasttext_min_count}: no token of the corpus is that frequent"
        )
    alphas = np.linspace(model.alpha, model.min_alpha, cfg.fasttext_epochs + 1)
    epochs_run = 0
    for epoch in range(cfg.fasttext_epochs):
        if time.perf_counter() > deadline:
            break
        model.train(
            corpus_iterable=_UntilDeadline(sentences, deadline),
            total_examples=model.corpus_count,
            epochs=1,
            start_alpha=float(alphas[epoch]),
            end_alpha=float(alphas[epoch + 1]),
        )
        epochs_run += 1
    info = {"fasttext_epochs_run": epochs_run, "fasttext_vocab": len(model.wv.key_to_index)}
    info["fasttext_s"] = round(time.perf_counter() - start, 3)
    return model, info


def _unit_rows(vectors: np.ndarray, centre: np.ndarray | float) -> torch.Tensor:
    x = torch.as_tensor(vectors - centre, dtype=torch.float32)
    return x / x.norm(dim=1, keepdim=True).clamp(min=1e-8)


def _combine(
    builder: PlanBuilder,
    inputs: PlanInputs,
    vectors: dict[int, np.ndarray],
    overlap: list[int],
    targets: list[int],
) -> int:
    """Rows of `targets` = sparsemax(cosine to overlap) x overlap's old rows; returns the total support."""
    mapping, support = inputs.mapping, 0
    centre = np.mean(list(vectors.values()), axis=0) if inputs.config.focus_center_vectors else 0.0
    keys = _unit_rows(np.stack([vectors[i] for i in overlap]), centre)
    overlap_old = np.array([mapping.pieces[i][0] for i in overlap])
    target_arr = np.array(targets)
    for start in range(0, len(targets), _ROWS_PER_BATCH):
        batch = target_arr[start : start + _ROWS_PER_BATCH]
        weights = sparsemax(_unit_rows(np.stack([vectors[i] for i in batch]), centre) @ keys.T)
        row, col = weights.nonzero(as_tuple=True)
        builder.add_many(batch[row.numpy()], overlap_old[col.numpy()], weights[row, col].double().numpy())
        support += int(row.numel())
    return support


def focus_plan(inputs: PlanInputs) -> tuple[RowPlan, dict]:
    """The FOCUS row plan (module docstring)."""
    mapping = inputs.mapping
    deadline = time.perf_counter() + inputs.config.fasttext_time_budget_s
    sentences, info = _token_sentences(inputs)
    model, ft_info = train_fasttext(sentences, inputs, deadline)
    del sentences
    info.update(ft_info)
    vectors: dict[int, np.ndarray] = {}
    if ft_info["fasttext_epochs_run"] == 0:  # out of time before any training: vectors are noise
        log.warning("embeddings: focus ran out of time before training fastText; using FVT means instead")
    else:
        known = model.wv.key_to_index
        vectors = {i: model.wv.vectors[known[t]] for i, t in enumerate(mapping.new_tokens) if t in known}

    copied, decomposed = mapping.ids_with("copied"), mapping.ids_with("decomposed")
    overlap = [i for i in copied if i in vectors]
    targets = [i for i in decomposed if i in vectors] if overlap else []
    chosen = set(targets)
    rare = [i for i in decomposed if i not in chosen]

    builder = PlanBuilder(inputs.rows, inputs.old_rows)
    mapping_rows(builder, mapping, mapping.ids_with("special") + copied)
    if inputs.config.focus_rare == "mean":
        mapping_rows(builder, mapping, rare)
    else:
        builder.mark(rare)
    support = _combine(builder, inputs, vectors, overlap, targets) if targets else 0
    info.update(
        overlap_used=len(overlap),
        focus_rows=len(targets),
        rare_rows=len(rare),
        mean_support=round(support / len(targets), 3) if targets else 0.0,
    )
    return builder.build(), {"focus": info}
