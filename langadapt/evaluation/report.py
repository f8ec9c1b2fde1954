"""Write `results.json`, `report.md` and a self-contained `report.html` (figures embedded).

The report is what a user opens first, so it leads with the answer (what the adapted model
gained and what it forgot, per language) and keeps method details for the end. The PNGs are
also written under `plots/` so `report.md` can show them and they can go into papers as they are.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from langadapt.evaluation import plots
from langadapt.evaluation.render import render_html, render_markdown
from langadapt.evaluation.tradeoff import tradeoffs
from langadapt.evaluation.training import training_section

RESULTS = "results.json"
"""The report folder's machine-readable results (what `langadapt eval` refuses to overwrite)."""


def write_report(
    results: dict, out: Path, training_metrics: dict[str, Path] | None = None,
    title: str = "langadapt evaluation", planned_energy: dict | None = None,
) -> dict:
    """Write results.json, plots/*.png, report.md and report.html into `out`; returns their paths.

    `training_metrics`: each training stage's metrics.jsonl, for the loss and held-out curves and the
    measured energy (when there are any); `planned_energy`: `training.planned_energy`, shown beside it."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results = {**results, "tradeoff": tradeoffs(results)}  # the card and `langadapt frontier` read it
    if training_metrics:
        results = {**results, "training": training_section(training_metrics, planned_energy)}
    (out / RESULTS).write_text(json.dumps(results, indent=2, ensure_ascii=False, default=str), "utf-8")
    figures = {
        "bpb": plots.plot_bpb(results, out / "plots" / "bpb.png"),
        "deltas": plots.plot_deltas(results, out / "plots" / "deltas.png"),
        "fertility": plots.plot_fertility(results, out / "plots" / "fertility.png"),
        "training": plots.plot_training(training_metrics or {}, out / "plots" / "training.png"),
        "validation": plots.plot_validation(training_metrics or {}, out / "plots" / "validation.png"),
    }
    figures = {k: v for k, v in figures.items() if v is not None}
    (out / "report.md").write_text(render_markdown(results, figures, out, title), "utf-8")
    embedded = {
        k: "data:image/png;base64," + base64.b64encode(p.read_bytes()).decode("ascii")
        for k, p in figures.items()
    }
    (out / "report.html").write_text(render_html(results, embedded, title), "utf-8")
    return {
        "results": out / RESULTS,
        "markdown": out / "report.md",
        "html": out / "report.html",
        **figures,
    }
