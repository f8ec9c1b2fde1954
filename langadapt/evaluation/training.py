"""The report's view of training: the held-out curve during training, measured vs planned energy.

Both come from what the training stages wrote (`metrics.jsonl`: train rows with
`epochs_by_source` and `joules_per_step`, validation rows with `valid`), plus `langadapt plan`'s
estimate for the run's resolved recipe. Steps are put on one axis: stage 2's step s is plotted at
(stage 1's last step + s), as in the training-loss figure.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

from langadapt.errors import LangadaptError
from langadapt.run.layout import RunLayout

RISE = 0.005
"""Relative rise of held-out bpb above its lowest point that the report calls "hurt" (0.5%):
smaller wiggles are within the noise of a fixed set of a few thousand tokens."""


def read_rows(path: Path) -> tuple[list[dict], list[dict]]:
    """(train rows, validation rows) of a metrics.jsonl, by step (a resumed run's rewrite wins)."""
    train: dict[float, dict] = {}
    valid: dict[float, dict] = {}
    if not Path(path).is_file():
        return [], []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a kill
        if not isinstance(row, dict) or "step" not in row:
            continue
        (valid if isinstance(row.get("valid"), dict) else train)[row["step"]] = row
    return [train[s] for s in sorted(train)], [valid[s] for s in sorted(valid)]


def validation_points(metrics: dict[str, Path]) -> list[dict]:
    """Every validation row of every stage, with `stage`, `global_step` (`offset`: where the stage
    starts on that axis) and the most repeated source's passes at that step (`source`, `epochs`)."""
    points, offset = [], 0
    for stage, path in metrics.items():
        train, valid = read_rows(path)
        epochs = {r["step"]: r.get("epochs_by_source") or {} for r in train}
        for row in valid:
            seen = epochs.get(row["step"]) or {}
            source = max(seen, key=seen.get) if seen else None
            points.append({"stage": stage, "step": row["step"], "global_step": offset + row["step"], "offset": offset,
                           "valid": row["valid"], "source": source, "epochs": seen.get(source)})
        last = [r["step"] for r in train] or [r["step"] for r in valid]
        offset += last[-1] if last else 0
    return points


def epoch_marks(metrics: dict[str, Path]) -> list[tuple[int, str, int]]:
    """(global step, source, pass number) where each stage's most repeated source starts its 2nd,
    3rd, ... pass, from the logged train rows (the step is the first logged one past the boundary)."""
    marks, offset = [], 0
    for path in metrics.values():
        train, _ = read_rows(path)
        final = train[-1].get("epochs_by_source") if train else None
        if final:
            source = max(final, key=final.get)
            passes = [(r["step"], r.get("epochs_by_source", {}).get(source, 0.0)) for r in train]
            marks += [(offset + step, source, math.floor(now) + 1)
                      for (_, before), (step, now) in itertools.pairwise(passes)
                      if math.floor(now) > math.floor(before)]
        offset += train[-1]["step"] if train else 0
    return marks


def validation_verdicts(points: list[dict]) -> list[str]:
    """One line per language: where held-out bpb was lowest, and whether it rose after that."""
    lines = []
    langs = list(dict.fromkeys(lang for p in points for lang in p["valid"]))
    for lang in langs:
        series = [(p, p["valid"][lang]["bits_per_byte"]) for p in points if lang in p["valid"]]
        best, best_bpb = min(series, key=lambda item: item[1])
        last, last_bpb = series[-1]
        where = f"step {best['global_step']} ({best['stage']} step {best['step']}"
        where += f", {best['source']} at {best['epochs']:.1f} epochs)" if best["epochs"] is not None else ")"
        if last_bpb > best_bpb * (1 + RISE):
            lines.append(f"{lang}: held-out bpb was lowest at {where}: {best_bpb:.4f}; it rose to {last_bpb:.4f} "
                         f"(+{last_bpb - best_bpb:.4f}) by step {last['global_step']}: training past that point "
                         "hurt this language")
        else:
            lines.append(f"{lang}: held-out bpb {last_bpb:.4f} at step {last['global_step']}, lowest {best_bpb:.4f} "
                         f"at {where}: no rise above {RISE:.1%} (repetition did not hurt yet)")
    return lines


def energy_rows(metrics: dict[str, Path], planned: dict | None) -> list[list[str]]:
    """Per stage: measured joules per step (all devices) next to the plan's estimate."""
    rows = []
    for stage, path in metrics.items():
        train, _ = read_rows(path)
        measured = [r for r in train if isinstance(r.get("joules_per_step"), (int, float))]
        plan = (planned or {}).get("joules_per_step", {}).get(stage)
        if not train or (not measured and plan is None):
            continue
        world = round(train[-1]["tokens_per_second"] / train[-1]["tokens_per_second_per_device"]) \
            if train[-1].get("tokens_per_second_per_device") else 1
        value = sum(r["joules_per_step"] for r in measured) / len(measured) * world if measured else None
        rows.append([stage, _joules(value) if value is not None else "not measured",
                     _joules(plan) if plan is not None else "n/a",
                     f"{value / plan:.2f}" if value is not None and plan else "n/a"])
    return rows


def _joules(value: float) -> str:
    """Whole joules for a 7B step (thousands), three significant digits for a toy model's (0.0412)."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def planned_energy(layout: RunLayout) -> dict | None:
    """`langadapt plan`'s joules per step per training stage for the run's resolved recipe, or None."""
    from langadapt.planning.plan import plan_joules_per_step
    from langadapt.planning.recipe_plan import plan_recipe
    from langadapt.recipe import load_recipe

    if not layout.resolved_recipe.is_file():
        return None
    try:
        plan = plan_recipe(load_recipe(layout.resolved_recipe).recipe)
    except (LangadaptError, OSError, ValueError) as error:
        return {"joules_per_step": {}, "note": f"no plan estimate: {error}"}
    hw = plan["hardware"]
    return {"joules_per_step": plan_joules_per_step(plan),
            "note": f"plan: {hw['num_gpus']} x {hw['name']} at {hw['watts']:g} W (TDP) and {hw['mfu']:.0%} MFU"}


def training_section(metrics: dict[str, Path], planned: dict | None) -> dict:
    """What results.json and the report say about training (empty lists when nothing was logged)."""
    points = validation_points(metrics)
    return {"validation": validation_verdicts(points), "energy": energy_rows(metrics, planned),
            "energy_note": (planned or {}).get("note")}
