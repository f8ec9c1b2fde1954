"""The initialisation methods, each turning a vocabulary mapping into a `RowPlan`.

`mean` and the random baselines live here; `focus`, `wechsel` and `align` need auxiliary data
(a corpus or word vectors) and have their own modules. Every method maps special tokens by role
(from the mapping) and gives fallback and padding rows the mean row, except the baselines, which
fill every row that is not a base token's own as their distribution says.

The baselines answer "is this better than what I would do anyway?":
- `transformers_resize`: `model.resize_token_embeddings(len(tokenizer))`, transformers' default
  since 4.46 (`draws.sample_resized`: in effect the mean row);
- `model_init`: the rows the model's own initializer draws (N(0, initializer_range^2));
- `random_full_cov`: N(mean, cov) with the full covariance, for every row but the specials (on an
  extended vocabulary every base row is kept): the "random" of earlier versions, a weak baseline
  (its rows are as large as real ones and confidently wrong).
"""

from __future__ import annotations

from langadapt.embeddings.row_plan import (
    USE_INITIALIZER,
    USE_RESIZE,
    PlanBuilder,
    PlanInputs,
    RowPlan,
    mapping_rows,
)
from langadapt.errors import LangadaptError


def mean_plan(inputs: PlanInputs) -> tuple[RowPlan, dict]:
    """FVT (Gee et al. 2022): row = mean of the old rows of the token's old pieces."""
    builder = PlanBuilder(inputs.rows, inputs.old_rows)
    mapping_rows(builder, inputs.mapping)
    return builder.build(), {}


def random_full_cov_plan(inputs: PlanInputs) -> tuple[RowPlan, dict]:
    """Every non-special row drawn from N(mean, cov) of the matrix it replaces.

    Overlapping tokens are drawn too, so the baseline measures what an initialisation carries
    over from the source model; special tokens keep their rows so generation still stops. An
    extended vocabulary (every base token at its id) keeps all base rows and draws only the new
    ones: randomising the base's own rows would not be another initialisation of the new tokens
    but another model.
    """
    mapping = inputs.mapping
    builder = PlanBuilder(inputs.rows, inputs.old_rows)
    kept = list(range(mapping.old_size)) if mapping.extends_base else mapping.ids_with("special")
    mapping_rows(builder, mapping, kept)
    kept_set = set(kept)
    builder.mark([i for i in range(mapping.new_size) if i not in kept_set])  # padding rows: the mean
    return builder.build(), {}


def transformers_resize_plan(inputs: PlanInputs) -> tuple[RowPlan, dict]:
    """What `resize_token_embeddings` gives: base tokens keep their rows, the rest `sample_resized`.

    On an extended vocabulary this is transformers exactly (every base token at its own id, the
    added and padding rows drawn). On a replaced one transformers would keep rows by id, i.e.
    other tokens' rows; the baseline keeps the rows of the tokens the base has (by bytes, as every
    method does), which makes it stronger, never weaker, than the literal resize.
    """
    return _draw_all_but(inputs, _base_tokens(inputs), USE_RESIZE), {}


def model_init_plan(inputs: PlanInputs) -> tuple[RowPlan, dict]:
    """Base tokens keep their rows, the rest are the model's own initializer's: N(0, initializer_range^2)."""
    if inputs.initializer_range is None:
        raise LangadaptError("embeddings.method=model_init: the model's config has no initializer_range")
    return _draw_all_but(inputs, _base_tokens(inputs), USE_INITIALIZER, inputs.initializer_range), {}


def _base_tokens(inputs: PlanInputs) -> list[int]:
    """New ids of tokens the base has (copied, or special mapped by role / content)."""
    return sorted(inputs.mapping.ids_with("copied") + inputs.mapping.ids_with("special"))


def _draw_all_but(inputs: PlanInputs, kept: list[int], kind: int, init_std: float = 0.0) -> RowPlan:
    """`kept` rows from their old pieces (one row each: copies), every other row (padding too) filled as `kind`."""
    builder = PlanBuilder(inputs.rows, inputs.old_rows)
    mapping_rows(builder, inputs.mapping, kept)
    kept_set = set(kept)
    builder.mark([i for i in range(inputs.rows) if i not in kept_set], kind)
    return builder.build(init_std)


def build_plan(inputs: PlanInputs) -> tuple[RowPlan, dict]:
    """Dispatch on `config.method`; returns the plan and method-specific report entries."""
    method = inputs.config.method
    if method == "mean":
        return mean_plan(inputs)
    if method == "transformers_resize":
        return transformers_resize_plan(inputs)
    if method == "model_init":
        return model_init_plan(inputs)
    if method == "random_full_cov":
        return random_full_cov_plan(inputs)
    if method == "focus":
        from langadapt.embeddings.focus import focus_plan  # gensim is only needed here

        return focus_plan(inputs)
    if method == "wechsel":
        from langadapt.embeddings.wechsel import wechsel_plan

        return wechsel_plan(inputs)
    if method == "align":
        from langadapt.embeddings.align import align_plan

        return align_plan(inputs)
    raise LangadaptError(f"embeddings.method: unknown method {method!r}")
