"""What a token costs: held-out tokens per UTF-8 byte with the run's tokenizer and with the base's.

Bits per byte compares models across tokenizers on purpose, and so hides what a vocabulary costs
at inference: a model whose tokenizer needs 0.33 tokens per byte of Bokmål runs a third more
forward passes (and fills its context a third sooner) than one that needs 0.25. Keeping,
extending or replacing the vocabulary (`tokenizer.kind` keep_base, extend, inherit) trades exactly
this against forgetting, so the report and `langadapt frontier` show it beside the target's gain.

The numbers are the tokenizer stage's (`metrics.json`: `tokenizer.metrics.compare_tokenizers` on
the run's held-out documents); nothing is tokenised again here. Shape, in results.json and in each
frontier point:

    {"run": {LANG: tokens per byte}, "base": {LANG: tokens per byte}}   "base" absent when unknown
"""

from __future__ import annotations

import json
import math

from langadapt.evaluation.tables import fmt
from langadapt.evaluation.tradeoff import target_langs
from langadapt.run.layout import RunLayout

RUN, BASE = "run", "base"
"""The two sides: the run's own tokenizer (the one its models use) and the base model's."""


def tokens_per_byte(bytes_per_token: object) -> float | None:
    """1 / bytes per token (what `tokenizer.metrics` records: the exchange rate between bits per
    byte and loss); None when missing or not a positive finite number (a language with no text)."""
    if isinstance(bytes_per_token, bool) or not isinstance(bytes_per_token, (int, float)):
        return None
    if not math.isfinite(bytes_per_token) or bytes_per_token <= 0:
        return None
    return 1.0 / bytes_per_token


def token_costs(layout: RunLayout) -> dict[str, dict[str, float]]:
    """Tokens per byte per held-out language from `layout`'s tokenizer stage; {} when it has no metrics.

    The run's tokenizer is metrics.json's `new`. With `keep_base` that IS the base tokenizer (the stage
    measures it once), so the base side is the same numbers; a scratch run has no base side."""
    try:
        per_tokenizer = json.loads(layout.tokenizer.metrics.read_text(encoding="utf-8"))["tokenizers"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    run = per_tokenizer.get("new")
    base = per_tokenizer.get("base") or (run if layout.stage_summary("tokenizer").get("kind") == "keep_base" else None)
    costs = {side: {lang: value for lang, m in sorted(per_lang.items())
                    if (value := tokens_per_byte(m.get("bytes_per_token"))) is not None}
             for side, per_lang in ((RUN, run), (BASE, base)) if isinstance(per_lang, dict)}
    return {side: per_lang for side, per_lang in costs.items() if per_lang}


def cost_line(results: dict) -> str | None:
    """The report's sentence under the trade-off table: each target language's tokens per byte
    (`nb 0.250 (base tokenizer 0.333)`); None when the run's tokenizer was not measured."""
    costs = results.get("tokens_per_byte") or {}
    run, base = costs.get(RUN) or {}, costs.get(BASE) or {}
    parts = [f"{lang} {fmt(run[lang])}" + (f" (base tokenizer {fmt(base[lang])})" if lang in base else "")
             for lang in target_langs(results) if lang in run]
    if not parts:
        return None
    return ("Held-out tokens per UTF-8 byte of the target with the run's tokenizer (what a token costs at "
            f"inference: lower is cheaper): {', '.join(parts)}.")
