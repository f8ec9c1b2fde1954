"""The report's figures (matplotlib, Agg backend, PNG): bpb, deltas, fertility, training loss of
every trained model over tokens and over FLOPs, held-out bpb during training; and `langadapt frontier`'s gain-vs-forgetting figure.

Each function takes the results dict (or the run directory) and a path, draws one figure and
returns the path, or None when there is nothing to draw (so the report simply leaves it out).
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from langadapt.evaluation.tables import ordered_langs
from langadapt.evaluation.training_report import TrainedRun, epoch_marks, token_axis, validation_points
from langadapt.run.metrics_log import read_metrics

GAIN, LOSS, NEUTRAL = "#2a9d4b", "#c8452c", "#9a9a9a"
"""Bar colours for a lower (better), a higher (worse) and an equal (or unknown) bpb than the reference."""


def _save(fig: plt.Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_bpb(results: dict, path: Path) -> Path | None:
    """Grouped bars: bits per byte per language, one bar per model."""
    models, langs = list(results["models"]), ordered_langs(results)
    if not langs:
        return None
    width = 0.8 / len(models)
    fig, ax = plt.subplots(figsize=(min(12.0, max(6.0, 0.5 * len(langs) * len(models) + 2)), 4.2))
    colours = plt.get_cmap("tab10").colors
    for i, name in enumerate(models):
        values = [results["models"][name].get(lang, {}).get("bits_per_byte", np.nan) for lang in langs]
        x = np.arange(len(langs)) - 0.4 + width * (i + 0.5)
        bars = ax.bar(x, values, width, label=name, color=colours[i % len(colours)])
        ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=1, rotation=90 if len(models) > 3 else 0)
    ax.set_xticks(np.arange(len(langs)), langs)
    ax.set_ylabel("bits per byte (lower is better)")
    ax.set_title("Held-out bits per byte per language")
    ax.margins(y=0.15)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _save(fig, path)


def plot_deltas(results: dict, path: Path) -> Path | None:
    """Bars of bpb minus the reference's: green = gained (lower), red = forgotten (higher)."""
    deltas, langs = results.get("deltas", {}), ordered_langs(results)
    models = [name for name in deltas if deltas[name]]
    if not models or not langs:
        return None
    fig, axes = plt.subplots(
        1, len(models), figsize=(max(4.0, 2.6 * len(models) + 1), 3.6), sharey=True, squeeze=False
    )
    for ax, name in zip(axes[0], models):
        values = [deltas[name].get(lang, {}).get("bits_per_byte", np.nan) for lang in langs]
        colours = [GAIN if v < 0 else LOSS if v > 0 else NEUTRAL for v in values]  # NaN compares False: grey
        bars = ax.bar(langs, values, color=colours)
        ax.bar_label(bars, fmt="%+.2f", fontsize=7, padding=1)
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_title(f"{name} vs {results.get('reference', 'reference')}", fontsize=10)
        ax.tick_params(axis="x", labelsize=8)
        ax.margins(y=0.2)
    axes[0][0].set_ylabel("Δ bits per byte (below 0 = gained)")
    fig.suptitle("Gains (green) and forgetting (red) per language", fontsize=11)
    return _save(fig, path)


def plot_fertility(results: dict, path: Path) -> Path | None:
    """Grouped bars of tokens per word per language, one bar per distinct tokenizer."""
    metrics = (results.get("tokenizers") or {}).get("metrics") or {}
    per_tok = metrics.get("tokenizers", {})
    langs = [
        lang
        for lang in metrics.get("languages", [])
        if any("fertility" in m.get(lang, {}) for m in per_tok.values())
    ]
    if not per_tok or not langs:
        return None
    width = 0.8 / len(per_tok)
    fig, ax = plt.subplots(figsize=(max(5.0, 1.0 * len(langs) + 2.5), 3.6))
    for i, (name, per_lang) in enumerate(per_tok.items()):
        values = [per_lang.get(lang, {}).get("fertility", np.nan) for lang in langs]
        bars = ax.bar(
            np.arange(len(langs)) - 0.4 + width * (i + 0.5),
            values,
            width,
            label=_tokenizer_label(results, name),
        )
        ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=1)
    ax.set_xticks(np.arange(len(langs)), langs)
    ax.set_ylabel("tokens per word (lower is better)")
    ax.set_title("Tokenizer fertility on held-out text")
    ax.margins(y=0.15)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _save(fig, path)


def _tokenizer_label(results: dict, name: str) -> str:
    used_by = (results.get("tokenizers") or {}).get("used_by", {}).get(name, [name])
    return f"{name} tokenizer ({', '.join(used_by)})"


def _curve_rows(path: Path) -> list[dict]:
    """The train rows of a metrics.jsonl (`run.metrics_log`) that a loss curve draws: a finite loss
    and a token count."""
    return [row for row in read_metrics(path).train
            if isinstance(row.get("loss"), (int, float)) and math.isfinite(row["loss"])
            and isinstance(row.get("tokens"), (int, float))]


Curve = tuple[str, list[float], list[float], list[float], bool]
"""(label, x, loss, lr, solid) of one training stage: solid for the evaluated run, dashed for others."""


def loss_curves(runs: list[TrainedRun], per_token: bool) -> list[Curve]:
    """A curve per stage of every run; x = tokens seen by the run (or training FLOPs
    spent, `per_token`), continuing across its stages. With FLOPs, a run is drawn up to its first
    stage whose FLOPs per token are unknown."""
    curves = []
    for index, run in enumerate(runs):
        offset = 0.0
        for record in run.stages:
            scale = record.flops_per_token if per_token else 1.0
            if not scale:
                break
            rows = _curve_rows(record.metrics)
            if not rows:
                continue
            x = [offset + r["tokens"] * scale for r in rows]
            curves.append((f"{run.name}: {record.stage}", x, [r["loss"] for r in rows],
                           [r.get("lr", np.nan) for r in rows], index == 0))
            offset = x[-1]
    return curves


def _draw_curves(ax: plt.Axes, curves: list[Curve], lr_ax: plt.Axes | None = None) -> None:
    """One colour per stage; the evaluated run's stages solid, other runs' (a twin, compared runs) dashed."""
    for (label, x, loss, lr, solid), colour in zip(curves, plt.get_cmap("tab10").colors):
        style = "-" if solid else "--"
        ax.plot(x, loss, style, marker=".", markersize=3, color=colour, label=label)
        if lr_ax is not None:
            lr_ax.plot(x, lr, style, color=colour)


def plot_training(runs: list[TrainedRun], path: Path) -> Path | None:
    """Loss (and LR) of every trained model's stages against the tokens its run has seen: stage 2
    continues where stage 1 stopped, a twin trained from scratch starts at 0 beside them."""
    curves = loss_curves(runs, per_token=False)
    if not curves:
        return None
    has_lr = any(np.isfinite(np.asarray(curve[3], dtype=float)).any() for curve in curves)
    fig, axes = plt.subplots(2 if has_lr else 1, 1, figsize=(7.5, 4.8 if has_lr else 3.4), sharex=True,
                             squeeze=False, gridspec_kw={"height_ratios": [3, 1]} if has_lr else None)
    _draw_curves(axes[0][0], curves, axes[1][0] if has_lr else None)
    axes[0][0].set_ylabel("training loss (nats/token)")
    axes[0][0].set_title("Training loss per model and stage over tokens seen")
    axes[0][0].legend(fontsize=8)
    if has_lr:
        axes[1][0].set_ylabel("learning rate")
        axes[1][0].ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
    axes[-1][0].set_xlabel("tokens seen (a run's stage 2 continues after its stage 1)")
    return _save(fig, path)


def plot_training_flops(runs: list[TrainedRun], path: Path) -> Path | None:
    """Loss against training FLOPs spent (`planning.flops`: a frozen-body stage 1 costs about 2/3 of
    a full step per token): where a cold twin at equal compute ends level with the warm run."""
    curves = loss_curves(runs, per_token=True)
    if not curves:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    _draw_curves(ax, curves)
    ax.set_xlabel("training FLOPs spent (a run's stage 2 continues after its stage 1)")
    ax.set_ylabel("training loss (nats/token)")
    ax.set_title("Training loss per model and stage over compute")
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_validation(runs: list[TrainedRun], path: Path) -> Path | None:
    """Held-out bits per byte per language during training of the evaluated run (its stages on one
    axis), with the passes over the most repeated source marked, so a rise after some repetition is
    visible; other trained models (the cold twin) dashed beside it. The axis is tokens seen when
    every point counted them (else optimizer steps, and the run alone)."""
    own = runs[0].metrics if runs else {}
    points = validation_points(own)
    if not points:
        return None
    axis = token_axis(own)
    by_tokens = all(p["global_step"] in axis for p in points)
    where = axis.get if by_tokens else (lambda step: step)
    several = by_tokens and len(runs) > 1
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    langs = list(dict.fromkeys(lang for p in points for lang in p["valid"]))
    for lang, colour in zip(langs, plt.get_cmap("tab10").colors):
        series = [(where(p["global_step"]), p["valid"][lang]["bits_per_byte"]) for p in points if lang in p["valid"]]
        ax.plot(*zip(*series), marker=".", color=colour, label=f"{runs[0].name} {lang}" if several else lang)
        best = min(series, key=lambda item: item[1])
        ax.plot(*best, marker="o", markersize=9, markerfacecolor="none", color=colour)
        for other in runs[1:] if several else []:
            other_axis = token_axis(other.metrics)
            theirs = [(other_axis[p["global_step"]], p["valid"][lang]["bits_per_byte"])
                      for p in validation_points(other.metrics) if lang in p["valid"] and p["global_step"] in other_axis]
            if theirs:
                ax.plot(*zip(*theirs), "--", marker=".", color=colour, alpha=0.7, label=f"{other.name} {lang}")
    stages = list(dict.fromkeys(p["stage"] for p in points))
    for stage in stages[1:]:  # where the stage starts: the previous one's last step
        start = where(next(p["offset"] for p in points if p["stage"] == stage))
        if start is not None:
            ax.axvline(start, color="grey", linestyle="--", linewidth=0.8)
    for step, source, number in epoch_marks(own):  # where the most repeated source starts another pass
        if (x := where(step)) is not None:
            ax.axvline(x, color="#999999", linestyle=":", linewidth=0.8)
            ax.annotate(f"{source} pass {number}", (x, 1), xycoords=("data", "axes fraction"), rotation=90,
                        fontsize=6, va="top", ha="right")
    unit = "tokens seen" if by_tokens else "optimizer step"
    ax.set_xlabel(f"{unit} (stage 2 continues after stage 1); circles: lowest point")
    ax.set_ylabel("held-out bits per byte")
    ax.set_title("Held-out bits per byte during training (" + " then ".join(stages) + ")")
    ax.legend(fontsize=8, ncol=2 if several else 1)
    return _save(fig, path)


def plot_frontier(points: list[dict], path: Path, title: str = "target gain vs largest forgetting") -> Path | None:
    """`langadapt frontier`'s figure: x = largest forgetting (%), y = target gain (%), one labelled
    dot per point, the Pareto front as a line. Up and to the left is better."""
    drawn = [p for p in points if p.get("gain") is not None and p.get("forgetting") is not None]
    if not drawn:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 5.0))
    x = [100 * p["forgetting"] for p in drawn]
    y = [100 * p["gain"] for p in drawn]
    on = [p.get("pareto", False) for p in drawn]
    if not all(on):
        ax.scatter([a for a, k in zip(x, on) if not k], [b for b, k in zip(y, on) if not k], c="#8a8a8a", s=40,
                   zorder=3, label="dominated")
    front = sorted((a, b) for a, b, k in zip(x, y, on) if k)
    if front:
        ax.plot(*zip(*front), color=GAIN, lw=1.6, marker="*", markersize=13, zorder=4, label="Pareto front")
    several = len({p["forgetting_lang"] for p in drawn}) > 1  # then say which language each point forgot
    middle = (min(x) + max(x)) / 2
    for a, b, p in zip(x, y, drawn):
        text = (p.get("label") or p.get("id", "")) + (f" ({p['forgetting_lang']})" if several else "")
        right = a > middle  # labels of the right half point left, so they stay inside the axes
        ax.annotate(text, (a, b), textcoords="offset points", xytext=(-6 if right else 6, 5),
                    ha="right" if right else "left", fontsize=8)
    ax.axvline(0, color="#bbbbbb", lw=0.8, zorder=1)  # no forgetting
    ax.legend(fontsize=8, loc="best", title="better: up and left", title_fontsize=8)
    target = ", ".join(sorted({p["target_lang"] for p in drawn}))
    forgot = ", ".join(sorted({p["forgetting_lang"] for p in drawn}))
    ax.set_xlabel(f"largest forgetting: bpb change of the worst other language ({forgot}), % (lower is better)")
    ax.set_ylabel(f"target gain: bpb reduction of {target}, % (higher is better)")
    ax.set_title(title)
    ax.margins(0.15)
    return _save(fig, path)
