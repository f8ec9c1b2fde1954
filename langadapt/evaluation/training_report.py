"""The report's view of training: every trained model's curves, each stage's settings and speed,
the held-out curve during training, measured vs planned energy.

All of it comes from what the training stages wrote (`metrics.jsonl`: train rows with `tokens`,
`tokens_per_second`, `epochs_by_source` and `joules_per_step`, validation rows with `valid`; each
stage's manifest: its summary and wall time), the run's resolved recipe (learning rate, schedule)
and `langadapt plan`'s estimate. A report compares several trained models (the run's own stages
and its cold twin, or runs given with `--compare`): `trained_runs` finds each model's run through
`RunLayout`, so a twin's curves are drawn beside the run's. Steps of one run are put on one axis:
stage 2's step s is plotted at (stage 1's last step + s).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from langadapt.errors import LangadaptError
from langadapt.planning.flops import flops_per_token
from langadapt.planning.models import load_model_dims
from langadapt.run.layout import MODEL_STAGES, TRAINING_STAGES, RunLayout, read_manifest
from langadapt.run.metrics_log import read_metrics
from langadapt.runtime.logs import clock

RISE = 0.005
"""Relative rise of held-out bpb above its lowest point that the report calls "hurt" (0.5%):
smaller wiggles are within the noise of a fixed set of a few thousand tokens."""


@dataclass(frozen=True)
class StageRecord:
    """One training stage as the report shows it: its metrics.jsonl and what it recorded about itself."""

    stage: str
    metrics: Path
    summary: dict = field(default_factory=dict)
    """The summary of its manifest (steps, tokens, global_batch, engine, settings); {} while unfinished."""
    wall_seconds: float | None = None
    """The whole stage's wall time (model loading and checkpoints included), from its manifest."""
    recipe: dict = field(default_factory=dict)
    """The stage's slice of the run's resolved recipe (optimizer, schedule)."""
    flops_per_token: float | None = None
    """Training FLOPs per token (`planning.flops`, the formula the plan and MFU use); None when unknown."""


@dataclass(frozen=True)
class TrainedRun:
    """A run whose training the report draws, named after the last of its models the report scores
    (`adapted` for the run itself, `cold` for its twin)."""

    name: str
    stages: tuple[StageRecord, ...]

    @property
    def metrics(self) -> dict[str, Path]:
        """stage -> metrics.jsonl, the shape the validation and energy sections read."""
        return {record.stage: record.metrics for record in self.stages}


def _stage_flops(model: Path, settings: dict) -> float | None:
    """FLOPs per token of the stage's model as it trained (`settings`: seq_len, trainable)."""
    try:
        return flops_per_token(load_model_dims(model), int(settings["seq_len"]), settings["trainable"])
    except (LangadaptError, KeyError, TypeError, ValueError):
        return None  # an unfinished stage (no model, no settings) or a policy the formula does not cover


def trained_run(name: str, layout: RunLayout) -> TrainedRun:
    """The training stages of the run at `layout` that logged at least one step."""
    recipe = layout.recipe()
    records = []
    for stage in TRAINING_STAGES:
        paths = layout.trained(stage)
        if not read_metrics(paths.metrics).train:
            continue
        manifest = read_manifest(layout.stage_dir(stage))
        summary = manifest.get("summary") if isinstance(manifest.get("summary"), dict) else {}
        records.append(StageRecord(stage, paths.metrics, summary, manifest.get("wall_seconds"),
                                   recipe.get(stage) if isinstance(recipe.get(stage), dict) else {},
                                   _stage_flops(paths.model, summary.get("settings") or {})))
    return TrainedRun(name, tuple(records))


def _run_of(model: Path) -> Path | None:
    """The run directory whose layout puts a model (a stage's or the export's) at `model`, if any:
    read from the layout itself, so a run folder needs no recipe file beside it to be found."""
    for folder in model.parents:
        layout = RunLayout(folder)
        if model in {layout.trained(stage).model for stage in MODEL_STAGES.values()} | {layout.export.model}:
            return folder
    return None


def trained_runs(models: Mapping[str, object]) -> list[TrainedRun]:
    """The runs the scored models (name -> folder) come from, in the order they first appear, each
    named after its last model; runs that trained nothing are left out.

    `base` is left out on purpose: it is where training started, not a model this comparison
    trained (the demo's base is itself a run, trained on English only)."""
    named: dict[Path, str] = {}
    for name, spec in models.items():
        if name == "base" or not isinstance(spec, (str, Path)):
            continue  # an in-memory model (init_random) has no run
        run_dir = _run_of(Path(spec).resolve())
        if run_dir is not None:
            named[run_dir] = name
    runs = [trained_run(name, RunLayout(run_dir)) for run_dir, name in named.items()]
    return [run for run in runs if run.stages]


def training_rate(record: StageRecord) -> float | None:
    """The stage's tokens per second over its training steps: each logged window's tokens over its
    time (tokens / the window's rate), summed, so checkpoint and validation time stay out as they
    do in the logged rate, and a slow first window weighs by its duration rather than as one row."""
    tokens = seconds = 0.0
    before = 0.0
    for row in read_metrics(record.metrics).train:
        seen, rate = row.get("tokens"), row.get("tokens_per_second")
        if isinstance(seen, (int, float)) and isinstance(rate, (int, float)) and rate > 0 and seen > before:
            tokens, seconds = tokens + seen - before, seconds + (seen - before) / rate
            before = seen
    return tokens / seconds if seconds else None


def _schedule(recipe: dict) -> str | None:
    """`cosine to 0.1x, 20 warm-up steps`, from the stage's recipe slice; None when it has none."""
    schedule = recipe.get("schedule") or {}
    kind = schedule.get("kind")
    if kind is None:
        return None
    floor = f" to {schedule['min_lr_ratio']:g}x" if kind != "constant" and "min_lr_ratio" in schedule else ""
    warmup = f", {schedule['warmup_steps']} warm-up steps" if schedule.get("warmup_steps") else ""
    return f"{kind}{floor}{warmup}"


def stage_facts(record: StageRecord) -> dict[str, str]:
    """What the training table says about one stage, each fact only where the stage recorded it."""
    summary = record.summary
    settings = summary.get("settings") if isinstance(summary.get("settings"), dict) else {}
    lr = (record.recipe.get("optimizer") or {}).get("lr")
    tokens, rate, seconds = summary.get("tokens"), training_rate(record), record.wall_seconds
    engine = [str(summary[k]) for k in ("engine", "precision") if k in summary]
    engine += [f"{summary['world_size']} process(es)"] if "world_size" in summary else []
    facts = {
        "trains": {"embeddings": "embeddings + head"}.get(settings.get("trainable"), settings.get("trainable")),
        "learning rate": f"{lr:g}" if isinstance(lr, (int, float)) else None,
        "schedule": _schedule(record.recipe),
        "global batch": (f"{summary['global_batch']} x {settings['seq_len']} tokens"
                         if "global_batch" in summary and "seq_len" in settings else None),
        "steps": f"{summary['steps']:,}" if isinstance(summary.get("steps"), int) else None,
        "tokens": f"{tokens:,}" if isinstance(tokens, int) else None,
        "training FLOPs": (f"{tokens * record.flops_per_token:.3g}"
                           if isinstance(tokens, int) and record.flops_per_token else None),
        "tokens/s (training steps)": f"{rate:,.0f}" if rate else None,
        "wall time (whole stage)": clock(seconds) if isinstance(seconds, (int, float)) else None,
        "engine": ", ".join(engine) or None,
    }
    return {label: value for label, value in facts.items() if value is not None}


def settings_rows(runs: list[TrainedRun]) -> tuple[list[str], list[list[str]]] | None:
    """The training table: a column per stage of every trained model, a row per setting or measure
    that at least one stage recorded."""
    columns = [(f"{run.name}: {record.stage}", stage_facts(record)) for run in runs for record in run.stages]
    labels = list(dict.fromkeys(label for _, facts in columns for label in facts))
    if not labels:
        return None
    return ["", *(name for name, _ in columns)], [[label, *(f.get(label, "–") for _, f in columns)] for label in labels]


def validation_points(metrics: dict[str, Path]) -> list[dict]:
    """Every validation row of every stage, with `stage`, `global_step` (`offset`: where the stage
    starts on that axis) and the most repeated source's passes at that step (`source`, `epochs`)."""
    points, offset = [], 0
    for stage, path in metrics.items():
        train, valid = read_metrics(path)
        epochs = {r["step"]: r.get("epochs_by_source") or {} for r in train}
        for row in valid:
            seen = epochs.get(row["step"]) or {}
            source = max(seen, key=seen.get) if seen else None
            points.append({"stage": stage, "step": row["step"], "global_step": offset + row["step"], "offset": offset,
                           "valid": row["valid"], "source": source, "epochs": seen.get(source)})
        last = [r["step"] for r in train] or [r["step"] for r in valid]
        offset += last[-1] if last else 0
    return points


def token_axis(metrics: dict[str, Path]) -> dict[int, float]:
    """global step -> tokens the run had seen there, at every logged train row that counted them;
    stages in order on one axis, with the steps offset as `validation_points` offsets them."""
    axis: dict[int, float] = {}
    step_offset, token_offset = 0, 0.0
    for path in metrics.values():
        train, valid = read_metrics(path)
        counted = [r for r in train if isinstance(r.get("tokens"), (int, float))]
        axis.update({step_offset + r["step"]: token_offset + r["tokens"] for r in counted})
        last = [r["step"] for r in train] or [r["step"] for r in valid]
        step_offset += last[-1] if last else 0
        token_offset += counted[-1]["tokens"] if counted else 0.0
    return axis


def epoch_marks(metrics: dict[str, Path]) -> list[tuple[int, str, int]]:
    """(global step, source, pass number) where each stage's most repeated source starts its 2nd,
    3rd, ... pass, from the logged train rows (the step is the first logged one past the boundary)."""
    marks, offset = [], 0
    for path in metrics.values():
        train, _ = read_metrics(path)
        final = train[-1].get("epochs_by_source") if train else None
        if final:
            source = max(final, key=final.get)
            passes = [(r["step"], r.get("epochs_by_source", {}).get(source, 0.0)) for r in train]
            marks += [(offset + step, source, math.floor(now) + 1)
                      for (_, before), (step, now) in itertools.pairwise(passes)
                      if math.floor(now) > math.floor(before)]
        offset += train[-1]["step"] if train else 0
    return marks


def validation_findings(points: list[dict]) -> list[dict]:
    """One finding per language: where held-out bpb was lowest, whether it rose after that (`hurt`:
    what the report styles as a loss), and the sentence that says so (`text`)."""
    findings = []
    langs = list(dict.fromkeys(lang for p in points for lang in p["valid"]))
    for lang in langs:
        series = [(p, p["valid"][lang]["bits_per_byte"]) for p in points if lang in p["valid"]]
        best, best_bpb = min(series, key=lambda item: item[1])
        last, last_bpb = series[-1]
        where = f"step {best['global_step']} ({best['stage']} step {best['step']}"
        where += f", {best['source']} at {best['epochs']:.1f} epochs of {best['stage']})" if best["epochs"] is not None else ")"
        hurt = last_bpb > best_bpb * (1 + RISE)
        if hurt:
            text = (f"{lang}: held-out bpb was lowest at {where}: {best_bpb:.4f}; it rose to {last_bpb:.4f} "
                    f"(+{last_bpb - best_bpb:.4f}) by step {last['global_step']}: training past that point "
                    "hurt this language")
        else:
            text = (f"{lang}: held-out bpb {last_bpb:.4f} at step {last['global_step']}, lowest {best_bpb:.4f} "
                    f"at {where}: no rise above {RISE:.1%} (repetition did not hurt yet)")
        findings.append({"lang": lang, "hurt": hurt, "text": text})
    return findings


def validation_verdicts(points: list[dict]) -> list[str]:
    """The findings' sentences, one per language."""
    return [finding["text"] for finding in validation_findings(points)]


def energy_rows(metrics: dict[str, Path], planned: dict | None) -> list[list[str]]:
    """Per stage: measured joules per step (all devices) next to the plan's estimate."""
    rows = []
    for stage, path in metrics.items():
        train, _ = read_metrics(path)
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
    """`langadapt plan`'s joules per step per training stage, or None without one: the plan the
    pipeline wrote into the run folder when it started (`planning.recipe_plan.write_run_plan`), else,
    for a run made before it did, the plan of the resolved recipe the run recorded. Read outside the
    evaluate stage's print: an estimate beside the measured column changes no score, so
    `--set cluster.hardware=a100` does not re-run evaluation."""
    from langadapt.planning.plan import plan_joules_per_step
    from langadapt.planning.recipe_plan import plan_recipe, run_plan_file
    from langadapt.recipe import load_recipe

    written = run_plan_file(layout)
    if not written.is_file() and not layout.resolved_recipe.is_file():
        return None
    try:
        plan = json.loads(written.read_text(encoding="utf-8")) if written.is_file() \
            else plan_recipe(load_recipe(layout.resolved_recipe).recipe)
        if "error" in plan:
            raise LangadaptError(plan["error"])
    except (LangadaptError, OSError, ValueError) as error:
        return {"joules_per_step": {}, "note": f"no plan estimate: {error}"}
    hw = plan["hardware"]
    return {"joules_per_step": plan_joules_per_step(plan),
            "note": f"plan: {hw['num_gpus']} x {hw['name']} at {hw['watts']:g} W (TDP) and {hw['mfu']:.0%} MFU"}


def training_section(metrics: dict[str, Path], planned: dict | None) -> dict:
    """What results.json and the report say about training (empty lists when nothing was logged)."""
    points = validation_points(metrics)
    return {"validation": validation_findings(points), "energy": energy_rows(metrics, planned),
            "energy_note": (planned or {}).get("note")}
