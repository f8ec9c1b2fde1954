"""`langadapt frontier RECIPE --grid KEY=V1,V2 ...`: the gain-vs-forgetting frontier of a recipe.

Every adaptation trades target-language gain against forgetting of the source language and the
neighbours (`evaluation.tradeoff`); which replay share, tokenizer language weights or learning rate
buys the most gain per point of forgetting is a question of measurement, not of taste. This runs
the cartesian product of the grid, each point as its own run of the recipe
(`--set name=<name>-<id> run_root=<out>` plus its grid values), through the library in this
process, and writes frontier.json, frontier.md and frontier.png into the output folder.

Sharing: stage fingerprints do not depend on the run's name (see `experiments.sweep`), so before a
point runs, every stage it shares with a finished point (same fingerprint: same keys read, same
inputs) is linked into its run with `sweep.link_stages`: points that differ only in training keys
prepare data, tokenizer and embeddings once; one tokenizer is trained per distinct tokenizer
setting. A link whose target no longer matches the point's fingerprint is removed first, so a
pipeline never writes through a link into another point's run. Resuming is a run's resuming: a
finished point's stages are complete and skipped.

Scoring is not shared: each point's evaluate stage scores every model its run holds (base, init,
init_random, stage1, adapted), also those another point already scored (the base model on the
same held-out set, a linked stage1). Kept so on purpose: a point's results.json is its run's own,
complete record (its report, model card and `langadapt run` export read it, with or without the
frontier), and the evaluate stage's fingerprint covers its own run's models and settings, not
another run's scores; reusing them would need the evaluate stage to take scores keyed by model
fingerprint, held-out set and suite settings, a change to every evaluation, not to the frontier.
The cost is one scoring pass per shared model and point, small beside training on any grid over
training keys (stage 2 trains per point).

Points stop after `evaluate` (the chosen one is exported with the `langadapt run` line the report
gives, which resumes its run) and run without the cold twin (`evaluation.cold_baseline=false`): the
frontier compares each point with the base model, and a twin per point would double the cost.
Slurm is out of scope: the points run one after another here (`langadapt launch --sweep` is the
Slurm matrix, for throughput).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

import yaml

from langadapt.errors import LangadaptError
from langadapt.evaluation.plots import plot_frontier
from langadapt.evaluation.tables import fmt
from langadapt.evaluation.token_cost import BASE, RUN, token_costs
from langadapt.evaluation.tradeoff import pareto, target_langs, tradeoff
from langadapt.experiments.sweep import link_stages
from langadapt.pipeline.runner import plan_actions, run_pipeline
from langadapt.recipe import LoadedRecipe, load_recipe
from langadapt.recipe.overrides import apply_overrides
from langadapt.run import completion
from langadapt.run.layout import STAGES, TRAINING_STAGES, RunLayout, read_manifest

log = logging.getLogger("langadapt")

FIXED_SETS = ("evaluation.cold_baseline=false",)
"""Set on every point (see the module docstring): the frontier is measured against the base model."""
OWN_KEYS = ("name", "run_root")
"""Keys the frontier sets per point; a grid over them would make points overwrite each other."""
SHAREABLE = STAGES[: STAGES.index("stage2") + 1]
"""Stages a point may take from another (evaluate and export are each point's own)."""
MAX_POINTS = 32
"""More points than this is a typo in a grid, not an experiment run one after another on one machine."""
JSON_FILE, MARKDOWN_FILE, PLOT_FILE = "frontier.json", "frontier.md", "frontier.png"


@dataclass(frozen=True)
class Point:
    """One combination of grid values and the run that measures it."""

    grid: dict[str, str]
    """Grid key -> its value as given on the command line."""
    loaded: LoadedRecipe
    sets: list[str]
    """Every `--set` item of this point's run, in order (the user's, the fixed ones, the grid's, name and run_root)."""

    @property
    def layout(self) -> RunLayout:
        return RunLayout(self.loaded.recipe.run_dir)

    @property
    def label(self) -> str:
        """`lr=0.001, replay=0.35`: the last part of each key, for the plot and the table."""
        return ", ".join(f"{key.rsplit('.', 1)[-1]}={value}" for key, value in self.grid.items())


def split_values(raw: str) -> list[str]:
    """`0.2,0.35` -> ["0.2", "0.35"]; commas inside brackets or quotes belong to one value
    (`{nb: 0.7, en: 0.3},{nb: 1.0}` is two values)."""
    values, depth, quote, current = [], 0, "", ""
    for ch in raw:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            values.append(current.strip())
            current = ""
            continue
        current += ch
    return [*values, current.strip()]


def parse_grid(items: list[str]) -> dict[str, list[str]]:
    """`["stage2.optimizer.lr=1e-3,4e-3", ...]` -> {"stage2.optimizer.lr": ["1e-3", "4e-3"], ...}.

    Only the form is checked here; whether a key exists and a value fits is the recipe's to say
    (`load_recipe`), for every point before any of them runs."""
    axes: dict[str, list[str]] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        values = split_values(raw) if sep else []
        if not key or not values or "" in values:
            raise LangadaptError(f"frontier --grid {item!r}: expected KEY=V1,V2,... e.g. stage2.optimizer.lr=1e-3,4e-3")
        if key in OWN_KEYS:
            raise LangadaptError(f"frontier --grid {key}: the frontier sets {' and '.join(OWN_KEYS)} for each point")
        if key in axes:
            raise LangadaptError(f"frontier --grid {key}: given twice; put every value in one --grid")
        if len(set(values)) != len(values):
            raise LangadaptError(f"frontier --grid {item}: a value is given twice")
        axes[key] = values
    if not axes:
        raise LangadaptError("frontier: give at least one --grid KEY=V1,V2")
    return axes


def point_id(grid: dict[str, str]) -> str:
    """A short id from the grid values alone: stable across invocations (resuming finds the run)
    and across the order of --grid flags."""
    return hashlib.sha256(json.dumps(sorted(grid.items())).encode()).hexdigest()[:8]


def build_points(recipe: str | Path, axes: dict[str, list[str]], out: Path, overrides: list[str]) -> list[Point]:
    """Every point's validated recipe; a bad key or value fails here, before anything runs."""
    name = load_recipe(recipe, overrides).recipe.name
    combos = [dict(zip(axes, values)) for values in itertools.product(*axes.values())]
    if len(combos) > MAX_POINTS:
        raise LangadaptError(f"frontier: {len(combos)} points; at most {MAX_POINTS} per frontier")
    points = []
    for grid in combos:
        sets = [*overrides, *FIXED_SETS, *(f"{k}={v}" for k, v in grid.items()),
                f"name={name}-{point_id(grid)}", f"run_root={out}"]
        try:
            loaded = load_recipe(recipe, sets)
        except LangadaptError as exc:  # the user's --set items were checked above: a grid value is wrong
            line = str(exc)
            raise LangadaptError(f"frontier --grid {line.removeprefix('--set ')}" if line.startswith("--set ")
                                 else f"frontier --grid: {line}") from None
        points.append(Point(grid, loaded, sets))
    return points


def share_stages(point: Point, done: list[Point]) -> list[str]:
    """Link into `point`'s run the stages a finished point already made with the same fingerprint
    (the longest such chain); returns the stages linked now."""
    layout = point.layout
    if not done and not any(layout.stage_dir(s).is_symlink() for s in SHAREABLE):
        return []  # the first point of a fresh frontier: nothing to share, no base model to hash yet
    prints = plan_actions(point.loaded, list(STAGES), force=False)[1]
    for stage in SHAREABLE:  # a stale link (the recipe changed since): never write through it
        folder = layout.stage_dir(stage)
        if folder.is_symlink() and not completion.is_complete(folder, prints[stage]):
            folder.unlink()
    def same_stages(other: Point) -> list[str]:  # fingerprints chain: a match implies the stages before
        return list(itertools.takewhile(lambda s: completion.is_complete(other.layout.stage_dir(s), prints[s]),
                                        SHAREABLE))

    donor = max(done, key=lambda other: len(same_stages(other)), default=None)
    stages = same_stages(donor) if donor is not None else []
    new = [s for s in stages if not layout.stage_dir(s).exists()]
    if donor is not None and new:
        link_stages(donor.layout, layout, new)
    return new


def measure(point: Point, recipe: str | Path) -> dict:
    """One point of frontier.json: grid values, how to run it, gain, largest forgetting, what a token
    costs (`token_cost`: the point's tokenizer and the base's, per held-out language), training cost."""
    layout = point.layout
    try:
        results = json.loads(layout.evaluation_results.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise LangadaptError(f"frontier: {layout.evaluation_results} missing or unreadable after the run") from None
    found = tradeoff(results)
    sides = {key: getattr(found, key) if found else None for key in
             ("model", "reference", "target_lang", "target_change", "gain", "forgetting_lang", "forgetting")}
    summaries = {s: layout.stage_summary(s) for s in TRAINING_STAGES}
    walls = [read_manifest(layout.stage_dir(s)).get("wall_seconds", 0) for s in TRAINING_STAGES]
    grid_sets = [f"{k}={v}" for k, v in point.grid.items()]
    return {
        "id": point_id(point.grid), "label": point.label, "grid": point.grid, "run_dir": str(layout.root),
        "sets": point.sets, "recipe_lines": recipe_lines(grid_sets),
        "command": f"langadapt run {shlex.quote(str(recipe))}"
                   + "".join(f" --set {shlex.quote(s)}" for s in point.sets),
        **sides, "headline": found.headline() if found else None,
        "target_langs": target_langs(results), "tokens_per_byte": token_costs(layout),
        "train_tokens": sum(int(s.get("tokens") or 0) for s in summaries.values()),
        "train_seconds": round(sum(walls), 1),
    }


def recipe_lines(grid_sets: list[str]) -> str:
    """The grid values as the YAML a recipe would hold (`stage2:\\n  optimizer:\\n    lr: 0.001`);
    the `--set` items themselves when a key indexes a list the recipe has (`data.sources[1].weight`)."""
    try:
        return yaml.safe_dump(apply_overrides({}, grid_sets), sort_keys=False, allow_unicode=True).strip()
    except LangadaptError:
        return "\n".join(grid_sets)


def mark_pareto(rows: list[dict]) -> list[dict]:
    """Each row with `pareto`: on the front of least forgetting and most target gain."""
    scored = [i for i, r in enumerate(rows) if r["gain"] is not None and r["forgetting"] is not None]
    front = pareto([(rows[i]["forgetting"], rows[i]["gain"]) for i in scored])
    on = {i for i, keep in zip(scored, front) if keep}
    return [{**row, "pareto": i in on} for i, row in enumerate(rows)]


def cost_langs(rows: list[dict]) -> list[str]:
    """The target languages whose tokens per byte the table shows (every point's, in order)."""
    return list(dict.fromkeys(lang for r in rows for lang in r.get("target_langs") or []))


def base_costs(rows: list[dict], langs: list[str]) -> str:
    """`nb 0.333`: the base tokenizer's tokens per byte, for the note above the table. One value per
    language unless the grid changes the base model; then every value found is listed."""
    found: dict[str, list[str]] = {lang: [] for lang in langs}
    for r in rows:
        base = (r.get("tokens_per_byte") or {}).get(BASE) or {}
        for lang in langs:
            if lang in base and fmt(base[lang]) not in found[lang]:
                found[lang].append(fmt(base[lang]))
    return ", ".join(f"{lang} {' or '.join(values)}" for lang, values in found.items() if values) or "not measured"


def forgetting_cell(row: dict) -> str:
    """The table's forgetting cell: `en +5.0%` when a language got worse, `none (en -1.0%: least
    gain)` when none did (the column is the worst other language; a fall is no forgetting, and
    calling it the largest forgetting would read as a loss), `–` when none was scored."""
    if row["forgetting"] is None:
        return "–"
    change = f"{row['forgetting_lang']} {row['forgetting']:+.1%}"
    return change if row["forgetting"] > 0 else f"none ({change}: least gain)"


def render_markdown(frontier: dict) -> str:
    """frontier.md: the plot, the table (Pareto points marked), how to run each point."""
    rows = frontier["points"]
    keys, langs = list(frontier["grid"]), cost_langs(rows)
    lines = [f"# Frontier of {frontier['recipe']}", "",
             ("Relative change of held-out bits per byte vs the base model (negative = better): the target "
              "language that gained least, and the largest rise among the other languages scored (source, "
              "replay, neighbours; `none` when no other language got worse). ★ = Pareto front: no other point "
              "forgets less and gains more. Every point "
              f"ran with {', '.join(FIXED_SETS)} and stopped after evaluate."), "",
             *([("tok/byte: the target's held-out tokens per UTF-8 byte with the point's tokenizer (what a token "
                 f"costs at inference; lower is cheaper); with the base tokenizer: {base_costs(rows, langs)}."), ""]
               if langs else []),
             f"![gain vs forgetting]({PLOT_FILE})", "",
             "| point | " + " | ".join(keys) + " | target (bpb vs base) | "
             + "".join(f"{lang} tok/byte | " for lang in langs)
             + "largest forgetting (bpb vs base) | training tokens | training s | Pareto |",
             "|---" * (len(keys) + len(langs) + 6) + "|"]
    for r in rows:
        gain = "–" if r["gain"] is None else f"{r['target_lang']} {r['target_change']:+.1%}"
        forgot = forgetting_cell(r)
        own = (r.get("tokens_per_byte") or {}).get(RUN) or {}
        cells = [r["id"], *(r["grid"][k] for k in keys), gain, *(fmt(own.get(lang)) for lang in langs), forgot,
                 f"{r['train_tokens']:,}", f"{r['train_seconds']:.0f}", "★" if r["pareto"] else ""]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    lines += ["", "## Each point", ""]
    for r in rows:
        lines += [f"### {r['id']}{' ★' if r['pareto'] else ''}: {r['label']}", "",
                  r["headline"] or "not evaluated", "", "```yaml", r["recipe_lines"], "```", "",
                  f"`{r['command']}` (resumes its run: only the export is left)", ""]
    return "\n".join(lines)


def run_frontier(recipe: str | Path, grid: list[str], out: str | Path | None = None,
                 overrides: list[str] | None = None) -> Path:
    """Run every point of the grid (sharing what stages it can), then write the frontier report
    into `out` (default `<run_root>/<name>-frontier`); returns that folder."""
    overrides = list(overrides or [])
    axes = parse_grid(grid)
    base = load_recipe(recipe, overrides).recipe
    folder = Path(out) if out else Path(base.run_root) / f"{base.name}-frontier"
    folder = folder.resolve()
    points = build_points(recipe, axes, folder, overrides)
    done: list[Point] = []
    for i, point in enumerate(points, 1):
        log.info("frontier: point %d/%d %s (%s)", i, len(points), point.loaded.recipe.name, point.label)
        if linked := share_stages(point, done):
            log.info("frontier: %s shares %s", point.loaded.recipe.name, ", ".join(linked))
        run_pipeline(point.loaded, until="evaluate", force=False)
        done.append(point)
    rows = mark_pareto([measure(p, recipe) for p in points])
    frontier = {"recipe": str(recipe), "grid": axes, "fixed_sets": list(FIXED_SETS), "points": rows}
    write_atomic(folder / JSON_FILE, json.dumps(frontier, indent=1, ensure_ascii=False))
    plot_frontier(rows, folder / PLOT_FILE, title=f"{base.name}: target gain vs largest forgetting")
    write_atomic(folder / MARKDOWN_FILE, render_markdown(frontier))
    return folder


def write_atomic(path: Path, text: str) -> None:
    """Write through a temporary file: an interrupted write never leaves half a report."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
