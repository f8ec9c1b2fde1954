"""Tokens per language of each training stage: what a replay share (or hand-set weights) amounts to.

The source table of `langadapt plan` needs every source's size; this one does not, when it can do
without: a stage whose sources all take a weight (no `epochs`, no `max_epochs` cap) splits its
tokens exactly by weight, which is what the stream does, so the shares a recipe states (e.g.
`--set stage2.replay=0.35`) are visible before any data is downloaded. Pure functions: the recipe
glue (`recipe_plan.plan_recipe`) passes the numbers in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def weighted_tokens(entries: Mapping[str, Mapping[str, Any]], stage_tokens: float) -> dict[str, float] | None:
    """Tokens per source split by weight, or None where sizes decide (an `epochs` source, a
    `max_epochs` cap, an entry with no weight): then only the size-aware planner knows."""
    if any(e.get("weight") is None or e.get("max_epochs") is not None for e in entries.values()):
        return None
    total = sum(float(e["weight"]) for e in entries.values())
    return {name: stage_tokens * float(e["weight"]) / total for name, e in entries.items()}


def language_rows(stage: str, source_tokens: Mapping[str, float],
                  sources: Iterable[tuple[str, str, str]]) -> list[dict[str, Any]]:
    """One row per (language, role) that the stage trains on: tokens and their share of the stage.

    `sources` is (name, lang, role) in recipe order (the rows keep it); sources without tokens
    (weight 0: evaluation-only neighbours) are left out."""
    grouped: dict[tuple[str, str], float] = {}
    for name, lang, role in sources:
        tokens = source_tokens.get(name, 0.0)
        if tokens > 0:
            grouped[(lang, role)] = grouped.get((lang, role), 0.0) + tokens
    total = sum(grouped.values())
    return [{"stage": stage, "lang": lang, "role": role, "tokens": tokens, "share": tokens / total}
            for (lang, role), tokens in grouped.items()]
