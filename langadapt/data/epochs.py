"""Epochs per source for one training stage: the single computation behind `plan`, the
preflight check and the training stream.

Before this existed, `langadapt plan` counted a source's unique tokens as its shard's
`num_tokens` and walked the sources in recipe order, while training counted whole `seq_len`
chunks and walked them sorted by name: near the 16-epoch cap the two disagreed on whether a
source was over it, and named different sources. Then each of them still assembled the plan's
inputs itself (sizes, steps x global batch, the force flag); now `stage_plan` is the one call all
three make, with `force` required, so none can fall back to a default the others do not share.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langadapt.data.schedule import MixPlan, SourceBudget, plan_mixture


def usable_tokens(num_tokens: float, seq_len: int) -> float:
    """Tokens the stream can draw from a shard: whole chunks of `seq_len` (each sample reads
    `seq_len + 1` tokens, the last one shared with the next chunk), so `epochs: e` is exactly
    e passes over the chunks."""
    return float(max(int(num_tokens) - 1, 0) // seq_len * seq_len)


def _budgets(mixture: Mapping[str, Mapping[str, Any]], num_tokens: Mapping[str, float],
                  seq_len: int) -> list[SourceBudget]:
    """One budget per mixture entry, in name order (the stream's order).

    `mixture` is `stream_mixture(...)`'s output (source -> weight/epochs/max_epochs); an entry with
    neither weight nor epochs takes the source's natural share (its chunk count)."""
    budgets = []
    for name in sorted(mixture):
        spec = mixture[name]
        unique = usable_tokens(num_tokens[name], seq_len)
        weight = spec.get("weight")
        if weight is None and spec.get("epochs") is None:
            weight = unique / seq_len
        budgets.append(SourceBudget(name, unique, weight, spec.get("epochs"), spec.get("max_epochs")))
    return budgets


def stage_plan(mixture: Mapping[str, Mapping[str, Any]], num_tokens: Mapping[str, float], seq_len: int,
               samples: int, *, force: bool) -> MixPlan:
    """A training stage's mixture plan: tokens, epochs and D'/D per source for `samples` samples of
    `seq_len` tokens, `samples` being the stage's steps x its global batch (`planning.training.global_batch`).

    The one derivation behind `langadapt plan` (`planning.recipe_plan`), the preflight check
    (`pipeline.preflight_data.report_estimated_epochs`) and the training stream (`data.stream.plan_stream`):
    `mixture` is the stage's `recipe.replay.stage_mixture`, `num_tokens` each source's unique tokens
    (its shard's count once the tokenizer stage has run), `force` the recipe's `data.force_epochs`.
    Raises EpochCapError (a LangadaptError) when a source would pass the epoch cap and `force` is off."""
    return plan_mixture(_budgets(mixture, num_tokens, seq_len), float(samples) * seq_len, force=force)
