"""The report's tables and sentences, computed from the results dict (shared by Markdown and HTML)."""

from __future__ import annotations

import math

BPB_NOTE = (
    "bits per byte = -(sum of log-likelihoods)/(UTF-8 bytes)/ln 2, as lm-evaluation-harness computes it; "
    "comparable across tokenizers. Lower is better: a negative Δ is a gain."
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


ROADS = {
    "keep_base": "the base model's own tokenizer, unchanged (continual pretraining only)",
    "extend": "the base tokenizer with the target language's tokens appended (every base id, merge and "
              "embedding row kept; only the new tokens' rows are initialised)",
}
"""What each `tokenizer.kind` road means; every other kind trains a new tokenizer (`tokenizer_road`)."""


def tokenizer_road(results: dict) -> str | None:
    """The sentence naming the run's tokenizer road (`tokenizer.kind`), None when not known (a
    folder evaluated away from any run or recipe). The road decides what a bpb change means: with
    keep_base every token and row is the base's, with a new tokenizer none is."""
    kind = (results.get("tokenizers") or {}).get("kind")
    if not kind:
        return None
    meaning = ROADS.get(kind, "a new tokenizer trained on the run's data, replacing the base's vocabulary; "
                              "every embedding row is initialised for it")
    return f"Tokenizer road: {kind}: {meaning}."


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
            row.append("–" if delta is None else f"{delta['bits_per_byte']:+.3f}{relative_note(delta)}")
        rows.append(row)
    return header, rows


MAX_RATIO = 1000.0
"""Ratios (a relative change, a perplexity ratio) beyond this factor either way are not printed: at
that size they measure a reference that is near zero or a model that is near random, not a change."""


def sane_ratio(value: object) -> float | None:
    """`value` when it is a finite ratio within MAX_RATIO of 1 (a relative change of -100% is 0), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value) if 1 / MAX_RATIO <= value <= MAX_RATIO else None


def relative_note(delta: dict) -> str:
    """` (-62.9%)`: a bpb delta's relative change, or nothing where that ratio means nothing."""
    relative = delta.get("relative")
    ratio = sane_ratio(1 + relative) if isinstance(relative, (int, float)) else None
    return "" if ratio is None else f" ({relative:+.1%})"


GAIN, LOSS, NEUTRAL = "gain", "loss", ""
"""How a report line is styled (its CSS class): better than the reference, worse, or neither."""


def verdicts(results: dict) -> list[tuple[str, str]]:
    """One sentence per language with its style: gained or forgot (or unchanged), by how much, for
    the headline model; the style follows the sign of the change, never the wording."""
    head, ref = headline_model(results), results.get("reference")
    lines = []
    for lang, delta in results.get("deltas", {}).get(head, {}).items():
        change = delta["bits_per_byte"]
        word, style = ("gained", GAIN) if change < 0 else ("forgot", LOSS) if change > 0 else ("unchanged", NEUTRAL)
        lines.append((f"{lang}: {head} {word} {abs(change):.3f} bits/byte vs {ref}{relative_note(delta)}", style))
    return lines


HIDDEN_METRICS = {"pairs", "sample_len", "mean_margin_nats"}
"""Task outputs kept in results.json but not shown as table rows (sizes and secondary numbers)."""
STDERR = "_stderr"
"""The suffix of a metric's standard error: shown in the metric's cell (`0.781 ± 0.073`), not as a row."""


def task_rows(results: dict) -> tuple[list[str], list[list[str]]] | None:
    """One table for all tasks: a row per (task, metric), a column per model, then the headline delta.

    The delta is a difference for scores (accuracy, chrF, bits per byte) and a ratio for perplexities
    (a difference of two perplexities says nothing: 7.7e9 - 12 is the base model being near random);
    counts are not compared."""
    models, ref, head = list(results["models"]), results.get("reference"), headline_model(results)
    rows = []
    for key, per_model in results.get("tasks", {}).items():
        first = flatten(next((per_model[m] for m in models if isinstance(per_model.get(m), dict)), {}))
        size = first.get("pairs") or first.get("sample_len")
        about = [str(x) for x in (per_model.get("lang"), size and f"n={size:g}") if x]
        label = f"{key} ({', '.join(about)})" if about else key
        metrics = [m for m in first if m.rsplit("/", 1)[-1] not in HIDDEN_METRICS and not m.endswith(STDERR)]
        for metric in metrics:
            row = [label, metric + ARROW.get(better(metric), ""),
                   *(_task_cell(flatten(per_model.get(m) or {}), metric) for m in models)]
            if head:
                ref_value = flatten(per_model.get(ref) or {}).get(metric)
                delta = (results.get("task_deltas", {}).get(key, {}).get(head) or {}).get(metric)
                row.append(_task_delta(metric, flatten(per_model.get(head) or {}).get(metric), ref_value, delta))
            rows.append(row)
    if not rows:
        return None
    return ["task", "metric", *models] + ([f"Δ {head} vs {ref}"] if head else []), rows


HIGHER_IS_BETTER = {"accuracy", "acc", "acc_norm", "chrf", "bleu", "f1", "mcc", "exact_match", "em"}
"""Scores (minimal pairs' accuracy, translation's chrF and BLEU, lm-eval's usual metrics)."""
LOWER_IS_BETTER = {"bits_per_byte", "ter"}
"""Costs besides perplexities (any metric named `*perplexity*` is one)."""
ARROW = {"higher": " ↑", "lower": " ↓"}
"""How a task table's metric says which way is better."""


def better(metric: str) -> str | None:
    """"higher" or "lower": which way `metric` improves, from its name's last known part (lm-eval
    keys carry a task and a filter around it: `ncb/exact_match/strict-match`); None when unknown."""
    for part in reversed(metric.split("/")):
        if part in HIGHER_IS_BETTER:
            return "higher"
        if part in LOWER_IS_BETTER or "perplexity" in part:
            return "lower"
    return None


def _task_cell(flat: dict[str, float], metric: str) -> str:
    """A model's value of `metric`, with `± stderr` where the task stored the metric's standard
    error (`METRIC_stderr`, e.g. minimal pairs' binomial one), so the spread sits beside the number."""
    value, stderr = flat.get(metric), flat.get(metric + STDERR)
    if not isinstance(value, float):
        return fmt(value)
    cell = fmt(value, ".4g" if abs(value) >= 1e4 else ".3f")
    shown = isinstance(stderr, float) and math.isfinite(stderr) and math.isfinite(value)
    return f"{cell} ± {stderr:.3f}" if shown else cell


def _task_delta(metric: str, value: object, ref_value: object, delta: object) -> str:
    """A task table's delta cell: `x0.52` for a perplexity, `+0.333` for a score, `–` where undefined."""
    if "perplexity" in metric.rsplit("/", 1)[-1]:
        ok = all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in (value, ref_value))
        ratio = sane_ratio(value / ref_value) if ok else None  # type: ignore[operator]
        return "–" if ratio is None else f"x{ratio:.3g}"
    if isinstance(delta, (int, float)) and math.isfinite(delta):
        return f"{delta:+.3f}"
    return "–"


def task_notes(results: dict) -> list[str]:
    """How to read the task table, for the kinds of task it holds."""
    keys = " ".join(results.get("tasks", {}))
    head = headline_model(results)
    notes = ["↑: higher is better, ↓: lower is better."
             + (f" Δ is {head} minus {results.get('reference')}: a gain is a positive Δ on ↑ rows and a "
                "negative Δ on ↓ rows." if head else "")]
    if any(task.get("kind") == "translation" for task in results.get("tasks", {}).values()):
        notes.append("translation: chrF and BLEU (0-100, higher is better) of greedy few-shot translations of "
                     "held-out parallel paragraphs, as lm-eval aggregates them (sacrebleu corpus scores).")
        notes += translation_verdicts(results)
    if "minimal_pairs" in keys:
        notes.append("minimal_pairs accuracy = share of pairs where the grammatical sentence gets the higher "
                     "log-likelihood (chance 0.5); higher is better. ± is its standard error, "
                     "sqrt(p(1-p)/(n-1)) as lm-eval's acc_stderr.")
    if "perplexity" in " ".join(m for task in results.get("tasks", {}).values() for per in task.values()
                                if isinstance(per, dict) for m in flatten(per)):
        notes.append("Perplexities are compared as a ratio (below 1 = better), and only within a factor of "
                     f"{MAX_RATIO:g}; bits per byte is the measure to compare across tokenizers.")
    return notes


TRANSLATION_EXAMPLES = 3
"""Pairs per direction the report shows with every model's translation (all are in translations/)."""


def translation_verdicts(results: dict) -> list[str]:
    """Per translation task, one sentence: whether any model translates, judged against copying the
    source unchanged (`translation.copy_source_scores`). A chrF at or below that floor shows no
    translation, however far above 0 it is; at this floor small models usually sit."""
    models = list(results["models"])
    lines = []
    for key, task in (results.get("translations") or {}).items():
        floor = task.get("copy_source") or {}
        scores = results.get("tasks", {}).get(key, {})
        above = [f"{model} in {direction} (chrF {scores[model][direction]['chrf']:.1f})"
                 for model in models for direction, copied in floor.items()
                 if isinstance(scores.get(model), dict) and direction in scores[model]
                 and scores[model][direction]["chrf"] > copied["chrf"]]
        floors = ", ".join(f"{direction} {copied['chrf']:.1f}" for direction, copied in floor.items())
        if not floors:
            continue
        if above:
            lines.append(f"{key}: above the chrF of copying the source unchanged ({floors}): {'; '.join(above)}.")
        else:
            lines.append(f"{key}: no model translates: every chrF is at or below what copying the source "
                         f"unchanged scores ({floors}), which needs no model at all.")
    return lines


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
