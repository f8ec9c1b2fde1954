"""The report's tables and sentences, computed from the results dict (shared by Markdown and HTML)."""

from __future__ import annotations

import math

BPB_NOTE = (
    "bits per byte = -(sum of log-likelihoods)/(UTF-8 bytes)/ln 2, as lm-evaluation-harness computes it; "
    "comparable across tokenizers. Lower is better."
)


def ordered_langs(results: dict) -> list[str]:
    """Languages in suite order (target language first), then any others."""
    langs = [lang for info in results.get("suites", {}).values() for lang in info.get("langs", [])]
    extra = sorted({lang for per in results["models"].values() for lang in per} - set(langs))
    return list(dict.fromkeys(langs + extra))


def headline_model(results: dict) -> str | None:
    """The model the report's first table compares with the reference: `adapted`, else the last one."""
    others = [name for name in results["models"] if name != results.get("reference")]
    return "adapted" if "adapted" in others else (others[-1] if others else None)


def fmt(value: object, spec: str = ".3f") -> str:
    """A number for a table cell; a dash when missing, n/a when not finite."""
    if isinstance(value, float) and not math.isfinite(value):
        return "n/a"
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return format(value, spec) if isinstance(value, float) else "–"


def bpb_rows(results: dict) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the bits-per-byte table (one row per language, one column per model)."""
    models, ref, head = list(results["models"]), results.get("reference"), headline_model(results)
    header = ["lang", "suite", *models] + ([f"Δ {head} vs {ref}"] if head else [])
    suite_of = {
        lang: name for name, info in results.get("suites", {}).items() for lang in info.get("langs", [])
    }
    rows = []
    for lang in ordered_langs(results):
        row = [lang, suite_of.get(lang, "")]
        row += [fmt(results["models"][m].get(lang, {}).get("bits_per_byte")) for m in models]
        if head:
            delta = results["deltas"].get(head, {}).get(lang)
            row.append("–" if delta is None else f"{delta['bits_per_byte']:+.3f} ({delta['relative']:+.1%})")
        rows.append(row)
    return header, rows


def verdicts(results: dict) -> list[str]:
    """One sentence per language: gained or forgot, by how much, for the headline model."""
    head, ref = headline_model(results), results.get("reference")
    lines = []
    for lang, delta in results.get("deltas", {}).get(head, {}).items():
        word = "gained" if delta["bits_per_byte"] < 0 else "forgot"
        lines.append(
            f"{lang}: {head} {word} {abs(delta['bits_per_byte']):.3f} bits/byte vs {ref} "
            f"({delta['relative']:+.1%})"
        )
    return lines


HIDDEN_METRICS = {"pairs", "sample_len", "mean_margin_nats"}
"""Task outputs kept in results.json but not shown as table rows (sizes and secondary numbers)."""


def task_rows(results: dict) -> tuple[list[str], list[list[str]]] | None:
    """One table for all tasks: a row per (task, metric), a column per model, then the headline delta."""
    models, ref, head = list(results["models"]), results.get("reference"), headline_model(results)
    rows = []
    for key, per_model in results.get("tasks", {}).items():
        first = flatten(next((per_model[m] for m in models if isinstance(per_model.get(m), dict)), {}))
        size = first.get("pairs") or first.get("sample_len")
        label = f"{key} ({', '.join(str(x) for x in (per_model.get('lang'), size and f'n={size:g}') if x)})"
        metrics = [m for m in first if m.rsplit("/", 1)[-1] not in HIDDEN_METRICS]
        for metric in metrics:
            values = [flatten(per_model.get(m) or {}).get(metric) for m in models]
            delta = (results.get("task_deltas", {}).get(key, {}).get(head) or {}).get(metric)
            rows.append(
                [label, metric, *map(fmt, values)]
                + ([f"{delta:+.3f}" if delta is not None else "–"] if head else [])
            )
    if not rows:
        return None
    return ["task", "metric", *models] + ([f"Δ {head} vs {ref}"] if head else []), rows


def flatten(metrics: dict, prefix: str = "") -> dict[str, float]:
    """Nested metric dicts flattened to `a/b` keys, numbers only (lm-eval results are per sub-task)."""
    flat: dict[str, float] = {}
    for key, value in metrics.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            flat[f"{prefix}{key}"] = value
    return flat


def tokenizer_rows(results: dict) -> tuple[list[str], list[list[str]]] | None:
    """Fertility and bytes per token per language for each distinct tokenizer."""
    metrics = (results.get("tokenizers") or {}).get("metrics") or {}
    per_tok = metrics.get("tokenizers", {})
    if not per_tok:
        return None
    header = ["lang"] + [f"{name} {what}" for name in per_tok for what in ("fertility", "bytes/token")]
    rows = [
        [lang]
        + [
            fmt(per_tok[n].get(lang, {}).get(k), ".2f")
            for n in per_tok
            for k in ("fertility", "bytes_per_token")
        ]
        for lang in metrics.get("languages", [])
    ]
    return header, rows


def throughput_rows(results: dict) -> tuple[list[str], list[list[str]]] | None:
    """Held-out scoring speed per model: tokens scored, seconds, tokens per second.

    Seconds are recovered per language as tokens / tokens_per_second (what `bits_per_byte`
    reports, tokenisation included), so the model's rate is total tokens over total time.
    """
    rows = []
    for model, per_lang in results["models"].items():
        scored = [v for v in per_lang.values() if v.get("tokens") and v.get("tokens_per_second")]
        if not scored:
            continue
        tokens = sum(v["tokens"] for v in scored)
        seconds = sum(v["tokens"] / v["tokens_per_second"] for v in scored)
        rows.append([model, f"{tokens:,}", f"{seconds:.1f}", f"{tokens / seconds:,.0f}"])
    return (["model", "tokens scored", "seconds", "tokens/s"], rows) if rows else None
