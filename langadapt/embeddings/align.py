"""`align`: a corpus-weighted mean of the old tokens each new token overlaps in real text.

FVT decomposes a token out of context; in running text the old tokenizer may split the same
characters differently (merges across the token boundary, a different word-initial piece).
`align` tokenises the target corpus with both tokenizers, and for every occurrence of a new
token adds, for each old token whose character span overlaps it, the number of overlapping
characters. A new token's row is the old rows weighted by those totals, so the pieces the old
model actually saw in this context, and the longer ones, count more. Copied and special tokens
keep their rows; new tokens absent from the corpus fall back to their FVT mean.
"""

from __future__ import annotations

import numpy as np

from langadapt.embeddings.row_plan import PlanBuilder, PlanInputs, RowPlan, bounded_texts, mapping_rows
from langadapt.errors import LangadaptError

_DOCS_PER_BATCH = 256


def overlap_pairs(
    new_ids: np.ndarray, new_spans: np.ndarray, old_ids: np.ndarray, old_spans: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(new id, old id, overlapping characters) for every overlapping pair of one document.

    Both span arrays are [n, 2] character offsets in text order, so the old tokens a new token
    overlaps form one contiguous range found by binary search; the ranges are expanded with
    `np.repeat` instead of a Python loop.
    """
    lo = np.searchsorted(old_spans[:, 1], new_spans[:, 0], side="right")
    hi = np.searchsorted(old_spans[:, 0], new_spans[:, 1], side="left")
    count = np.maximum(hi - lo, 0)
    rep = np.repeat(np.arange(len(new_ids)), count)
    within = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    old_pos = lo[rep] + within
    chars = np.minimum(new_spans[rep, 1], old_spans[old_pos, 1]) - np.maximum(
        new_spans[rep, 0], old_spans[old_pos, 0]
    )
    keep = chars > 0
    return new_ids[rep][keep], old_ids[old_pos][keep], chars[keep]


def _encode(tokenizer, texts: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
    if not getattr(tokenizer, "is_fast", False):
        raise LangadaptError("embeddings.method='align' needs fast tokenizers (character offsets)")
    enc = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)
    return [
        (np.asarray(ids, dtype=np.int64), np.asarray(spans, dtype=np.int64).reshape(-1, 2))
        for ids, spans in zip(enc["input_ids"], enc["offset_mapping"])
    ]


def alignment_counts(inputs: PlanInputs, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(unique keys new_id * old_rows + old_id, total overlapping characters) over the corpus."""
    keys = np.zeros(0, dtype=np.int64)
    totals = np.zeros(0)
    for start in range(0, len(texts), _DOCS_PER_BATCH):
        batch = texts[start : start + _DOCS_PER_BATCH]
        parts_k, parts_w = [keys], [totals]
        for (n_ids, n_sp), (o_ids, o_sp) in zip(
            _encode(inputs.new_tokenizer, batch), _encode(inputs.old_tokenizer, batch)
        ):
            new, old, chars = overlap_pairs(n_ids, n_sp, o_ids, o_sp)
            parts_k.append(new * inputs.old_rows + old)
            parts_w.append(chars.astype(np.float64))
        keys, inverse = np.unique(np.concatenate(parts_k), return_inverse=True)
        totals = np.bincount(inverse, weights=np.concatenate(parts_w), minlength=keys.size)
    return keys, totals


def align_plan(inputs: PlanInputs) -> tuple[RowPlan, dict]:
    """The `align` row plan (module docstring)."""
    mapping = inputs.mapping
    texts = bounded_texts(inputs.corpus, inputs.config.max_corpus_mb, "align")
    keys, totals = alignment_counts(inputs, texts)
    rows, old = keys // inputs.old_rows, keys % inputs.old_rows

    decomposed = np.array(mapping.ids_with("decomposed"), dtype=np.int64)
    use = np.isin(rows, decomposed)
    rows, old, totals = rows[use], old[use], totals[use]
    row_sum = np.bincount(rows, weights=totals, minlength=inputs.rows)

    builder = PlanBuilder(inputs.rows, inputs.old_rows)
    seen = set(np.unique(rows).tolist())
    unseen = [i for i in decomposed.tolist() if i not in seen]
    mapping_rows(builder, mapping, mapping.ids_with("special") + mapping.ids_with("copied") + unseen)
    if rows.size:
        builder.add_many(rows, old, totals / row_sum[rows])
    info = {"aligned_rows": len(seen), "unseen_rows": len(unseen), "pairs": int(rows.size)}
    info["corpus_mb"] = round(sum(len(t.encode("utf-8")) for t in texts) / 1e6, 3)
    return builder.build(), {"align": info}
