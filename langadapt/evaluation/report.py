"""Write `results.json`, `report.md` and a self-contained `report.html` (figures embedded).

The report is what a user opens first, so it leads with the answer (what the adapted model
gained and what it forgot, per language) and keeps method details for the end. The PNGs are
also written under `plots/` so `report.md` can show them and they can go into papers as they are.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from urllib.parse import quote

from langadapt.evaluation import plots
from langadapt.evaluation.naming import RESULTS
from langadapt.evaluation.tables import TRANSLATION_EXAMPLES
from langadapt.evaluation.render import render_html, render_markdown
from langadapt.evaluation.tradeoff import tradeoffs
from langadapt.evaluation.training_report import TrainedRun, settings_rows, training_section


def write_report(
    results: dict, out: Path, runs: list[TrainedRun] | None = None,
    title: str = "langadapt evaluation", planned_energy: dict | None = None,
) -> dict:
    """Write results.json, plots/*.png, report.md and report.html into `out`; returns their paths.

    `runs`: the trained models' runs (`training.trained_runs`), the evaluated one first: every
    run's loss curves and stage settings, the first's held-out curve and measured energy;
    `planned_energy`: `training.planned_energy`, shown beside it."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results = {**results, "tradeoff": tradeoffs(results),  # the card and `langadapt frontier` read it
               "translations": write_translations(results.get("translations") or {}, out)}
    runs = runs or []
    if runs:
        results = {**results, "training": {**training_section(runs[0].metrics, planned_energy),
                                           "stages": settings_rows(runs)}}
    (out / RESULTS).write_text(json.dumps(results, indent=2, ensure_ascii=False, default=str), "utf-8")
    figures = {
        "bpb": plots.plot_bpb(results, out / "plots" / "bpb.png"),
        "deltas": plots.plot_deltas(results, out / "plots" / "deltas.png"),
        "fertility": plots.plot_fertility(results, out / "plots" / "fertility.png"),
        "training": plots.plot_training(runs, out / "plots" / "training.png"),
        "training_flops": plots.plot_training_flops(runs, out / "plots" / "training_flops.png"),
        "validation": plots.plot_validation(runs, out / "plots" / "validation.png"),
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


TRANSLATIONS = "translations"
"""The folder of the models' translations, beside results.json."""


def translation_file(key: str, model: str, direction: str) -> Path:
    """`translations/SUITE/TASK/MODEL.DIRECTION.jsonl`, relative to the report folder; each part
    percent-quoted, so a model named `run/stage2` or `../x` stays one file inside the folder."""
    suite, _, task = key.partition("/")
    parts = [quote(part, safe="") for part in (suite, task, model)]
    return Path(TRANSLATIONS, parts[0], parts[1], f"{parts[2]}.{quote(direction, safe='')}.jsonl")


def write_translations(translations: dict, out: Path) -> dict:
    """Each model's translations (`evaluate`'s results["translations"]) as JSONL, a line per scored
    pair, as lm-eval's `--log_samples` keeps its model outputs: a chrF alone says nothing of what a
    model wrote. Returns what results.json keeps in their place: per task the copy-the-source
    floor, the files ({model: {direction: path}}) and, per direction, the first
    `TRANSLATION_EXAMPLES` pairs with every model's translation (the report shows them)."""
    kept: dict = {}
    for key, task in translations.items():
        files: dict[str, dict[str, str]] = {}
        examples: dict[str, list[dict]] = {}
        for model, per_direction in task.get("outputs", {}).items():
            for direction, rows in per_direction.items():
                path = translation_file(key, model, direction)
                (out / path).parent.mkdir(parents=True, exist_ok=True)
                (out / path).write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), "utf-8")
                files.setdefault(model, {})[direction] = path.as_posix()
                shown = examples.setdefault(direction, [{**_given(row), "hypotheses": {}}
                                                        for row in rows[:TRANSLATION_EXAMPLES]])
                for example, row in zip(shown, rows):  # every model translated the same rows, in order
                    example["hypotheses"][model] = row["hypothesis"]
        kept[key] = {"copy_source": task.get("copy_source", {}), "files": files, "examples": examples}
    return kept


def _given(row: dict) -> dict:
    """A logged translation without the model's part: what every model was given."""
    return {key: row[key] for key in ("doc_id", "source", "reference")}
