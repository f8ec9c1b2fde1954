"""The initialisation methods, each turning a vocabulary mapping into a `RowPlan`.

`mean` and `random` live here; `focus`, `wechsel` and `align` need auxiliary data (a corpus or
word vectors) and have their own modules. Every method maps special tokens by role (from the
mapping) and gives fallback and padding rows the mean row.
"""

from __future__ import annotations

from langadapt.embeddings.row_plan import PlanBuilder, PlanInputs, RowPlan, mapping_rows
from langadapt.errors import LangadaptError


def mean_plan(inputs: PlanInputs) -> tuple[RowPlan, dict]:
    """FVT (Gee et al. 2022): row = mean of the old rows of the token's old pieces."""
    builder = PlanBuilder(inputs.rows, inputs.old_rows)
    mapping_rows(builder, inputs.mapping)
    return builder.build(), {}


def random_plan(inputs: PlanInputs) -> tuple[RowPlan, dict]:
    """Baseline: every non-special row drawn from N(mean, cov) of the matrix it replaces.

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
    builder.mark_random([i for i in range(mapping.new_size) if i not in kept_set])
    return builder.build(), {}


def build_plan(inputs: PlanInputs) -> tuple[RowPlan, dict]:
    """Dispatch on `config.method`; returns the plan and method-specific report entries."""
    method = inputs.config.method
    if method == "mean":
        return mean_plan(inputs)
    if method == "random":
        return random_plan(inputs)
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
