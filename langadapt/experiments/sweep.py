"""Scaling sweeps: `langadapt launch RECIPE --slurm --sweep nodes=1,2,4 gpus=1,8`, then `langadapt sweep-report`.

The matrix a national-LLM project measures by hand before committing its GPU-hours: one short
stage-2 run per (nodes, GPUs per node) configuration, and per configuration the median tokens/s
after warm-up, tokens/s per GPU and the scaling efficiency against the smallest configuration.
The per-GPU batch is the recipe's (global batch = micro batch x accumulation x world size), so
the efficiency is weak scaling: 1.0 means adding GPUs added their full share of throughput.

Layout of the sweep folder (default `<run_root>/<name>-sweep`):

    prepare.sbatch        data..stage1 of the recipe's own run (`runs/<name>`), once
    n2g8.sbatch, ...      one job per configuration, after `prepare` succeeded (submit.sh)
    <name>-sweep-n2g8/    that configuration's run: links to the prepared stages + its own stage2/
    submit.sh, logs/, sweep.json (written last: the sweep is complete), report.json (sweep-report)

Each configuration is a run of its own (`--set name=... run_root=...`), so none shares or
resumes another's stage 2. Its stages before stage 2 are symbolic links to the prepared run's:
stage fingerprints do not depend on the run's name, so the pipeline finds them complete and
trains stage 2 only; nothing is prepared twice and no configuration waits on another.
"""

from __future__ import annotations

import difflib
import itertools
import json
import os
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from langadapt.errors import LangadaptError
from langadapt.recipe.paths import check_name
from langadapt.run.layout import MARKER, STAGES, RunLayout
from langadapt.run.metrics_log import read_metrics
from langadapt.runtime.launch_options import LaunchOptions, sbatch_options
from langadapt.runtime.presets import PRESETS, ClusterPreset, PresetName
from langadapt.runtime.sbatch import write_sbatch

SWEEP_KEYS = {"nodes": "nodes", "gpus": "gpus_per_node"}
"""`--sweep` key -> the launch setting it varies."""
MAX_CONFIGURATIONS = 32
"""More jobs than this is a typo (nodes=1,2,4,8,16,32,64 x gpus=1,2,4,8 is 28), not a sweep."""
DEFAULT_STEPS, DEFAULT_WARMUP, DEFAULT_TIME = 30, 5, "1:00:00"
SWEEP_FILE, REPORT_FILE = "sweep.json", "report.json"
_STEP_EXIT = re.compile(r"^langadapt: .* exited with (\d+) at ", re.MULTILINE)
"""The line the generated script's `step` function prints when a step ends (`runtime.sbatch._run_block`)."""


@dataclass(frozen=True)
class SweepPoint:
    """One configuration of the matrix."""

    nodes: int
    gpus_per_node: int

    @property
    def name(self) -> str:
        return f"n{self.nodes}g{self.gpus_per_node}"

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node


def parse_sweep(items: list[str]) -> dict[str, list[int]]:
    """`["nodes=1,2,4", "gpus=1,8"]` -> {"nodes": [1, 2, 4], "gpus_per_node": [1, 8]}."""
    axes: dict[str, list[int]] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not raw:
            raise LangadaptError(f"launch --sweep {item!r}: expected KEY=V1,V2,... e.g. nodes=1,2,4")
        if key not in SWEEP_KEYS:
            close = difflib.get_close_matches(key, SWEEP_KEYS, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise LangadaptError(f"launch --sweep {item}: unknown key {key!r}{hint}; keys are {', '.join(SWEEP_KEYS)}")
        if SWEEP_KEYS[key] in axes:
            raise LangadaptError(f"launch --sweep {item}: {key} given twice")
        try:
            values = [int(v) for v in raw.split(",")]
        except ValueError:
            raise LangadaptError(f"launch --sweep {item}: values must be whole numbers, e.g. {key}=1,2,4") from None
        if min(values) < 1 or len(set(values)) != len(values):
            raise LangadaptError(f"launch --sweep {item}: values must be distinct and at least 1")
        axes[SWEEP_KEYS[key]] = values
    return axes


def sweep_points(axes: dict[str, list[int]], nodes: int, gpus_per_node: int,
                 preset: PresetName | ClusterPreset) -> list[SweepPoint]:
    """The matrix, smallest world first; an axis not swept stays at `nodes` / `gpus_per_node`."""
    cluster = PRESETS[preset] if isinstance(preset, str) else preset
    gpu_values = axes.get("gpus_per_node", [gpus_per_node])
    if cluster.gpus_per_node and max(gpu_values) > cluster.gpus_per_node:
        raise LangadaptError(f"launch --sweep gpus={max(gpu_values)}: preset {cluster.name} has "
                             f"{cluster.gpus_per_node} GPUs per node")
    points = [SweepPoint(n, g) for n, g in itertools.product(axes.get("nodes", [nodes]), gpu_values)]
    if len(points) > MAX_CONFIGURATIONS:
        raise LangadaptError(f"launch --sweep: {len(points)} configurations; at most {MAX_CONFIGURATIONS} per sweep")
    return sorted(points, key=lambda p: (p.world_size, p.nodes))


def throughput_overrides(steps: int) -> list[str]:
    """`--set` items that make stage 2 a short throughput run: every step logged (the median needs
    each one), no periodic checkpoint, no validation and no profiler (they would stall steps).
    No checkpoint at the end either (optimizer state nobody resumes: ~16 bytes per parameter); the
    final model of stage 2 is still written (outside the measured steps), as every stage 2 does."""
    return [f"stage2.steps={steps}", "stage2.log_every=1", "stage2.checkpoint.every_steps=null",
            "stage2.checkpoint.every_minutes=null", "stage2.checkpoint.at_end=false",
            "stage2.validation.every_steps=null", "stage2.profile_steps=null"]


def write_sweep(recipe_path: str | Path, points: list[SweepPoint], *, run_name: str, run_dir: Path,
                out_dir: Path, steps: int = DEFAULT_STEPS, warmup_steps: int = DEFAULT_WARMUP,
                prepare_nodes: int = 1, run_args: list[str] | None = None, job_name: str | None = None,
                time: str = DEFAULT_TIME, **options: object) -> Path:
    """Write the sweep folder for the recipe whose run is `run_dir` (named `run_name`); returns it.

    `options` are the `write_sbatch` options shared by every script (preset, gpus_per_node for the
    preparation job, account, partition, setup, ...); `run_args` go to every `langadapt run`."""
    if steps <= warmup_steps + 2:
        raise LangadaptError(f"launch --steps {steps}: need more than --warmup-steps + 2 = {warmup_steps + 2} "
                             "(the median is over the steps after warm-up)")
    if warmup_steps < 0:
        raise LangadaptError(f"launch --warmup-steps {warmup_steps}: must be 0 or more")
    out_dir = out_dir.resolve()
    if (out_dir / SWEEP_FILE).exists():
        raise LangadaptError(f"launch --sweep: {out_dir} already holds a sweep ({SWEEP_FILE}); "
                             "remove it or choose another folder with --out")
    for point in points:  # each becomes a run's name on the cluster: a bad one fails here, not after the queue
        check_name(f"{run_name}-sweep-{point.name}", f"launch --sweep: the run name of configuration {point.name}")
    base, run_args, logs = job_name or run_name, list(run_args or []), str(out_dir / "logs")
    prepare = write_sbatch(recipe_path, nodes=prepare_nodes, time=time, out_path=out_dir / "prepare.sbatch",
                           job_name=f"{base}-sweep-prepare", run_args=run_args, until="stage1", log_dir=logs,
                           **options)
    configurations = []
    for point in points:
        name = f"{run_name}-sweep-{point.name}"
        config_run = out_dir / name
        link_stages(RunLayout(run_dir.resolve()), RunLayout(config_run), STAGES[: STAGES.index("stage2")])
        sets = [*throughput_overrides(steps), f"run_root={out_dir}", f"name={name}"]
        script = write_sbatch(recipe_path, nodes=point.nodes, time=time, out_path=out_dir / f"{point.name}.sbatch",
                              job_name=f"{base}-sweep-{point.name}", log_dir=logs, prepare=False, until="stage2",
                              run_args=run_args + [arg for item in sets for arg in ("--set", item)],
                              **{**options, "gpus_per_node": point.gpus_per_node})
        configurations.append({"name": point.name, "nodes": point.nodes, "gpus_per_node": point.gpus_per_node,
                               "world_size": point.world_size, "run_dir": str(config_run), "script": script.name,
                               "job_name": f"{base}-sweep-{point.name}"})
    _write_submit(out_dir, prepare.name, [c["script"] for c in configurations])
    sweep = {"recipe": str(Path(recipe_path).resolve()), "prepared_run": str(run_dir.resolve()), "steps": steps,
             "warmup_steps": warmup_steps, "prepare": {"script": prepare.name, "job_name": f"{base}-sweep-prepare"},
             "configurations": configurations}
    tmp = out_dir / f"{SWEEP_FILE}.tmp"
    tmp.write_text(json.dumps(sweep, indent=1))
    os.replace(tmp, out_dir / SWEEP_FILE)
    return out_dir


def link_stages(prepared: RunLayout, config: RunLayout, stages: Sequence[str]) -> None:
    """Link `stages` of the prepared run (and its content-hash cache, so source files are not
    hashed again) into another run of the same recipe: stage fingerprints do not depend on the
    run's name, so its pipeline finds them complete. The links may dangle until the preparation
    job ran (a sweep); a stage the run already has, as a link or its own folder, is kept."""
    config.root.mkdir(parents=True, exist_ok=True)
    links = [(prepared.stage_dir(s), config.stage_dir(s)) for s in stages]
    for target, link in [*links, (prepared.hash_cache, config.hash_cache)]:
        if not link.is_symlink() and not link.exists():
            link.symlink_to(target)


def _write_submit(out_dir: Path, prepare: str, scripts: list[str]) -> None:
    """submit.sh: the preparation job, then every configuration after it succeeded; a failed
    preparation cancels them (`--kill-on-invalid-dep`) instead of leaving them pending forever."""
    lines = ["#!/bin/bash", "# Submit the scaling sweep (written by `langadapt launch --sweep`).", "set -euo pipefail",
             'cd "$(dirname "$0")"', f"prepare=$(sbatch --parsable {prepare} | cut -d';' -f1)",
             'echo "prepare: job $prepare"', f"for script in {' '.join(scripts)}; do",
             '  id=$(sbatch --parsable --dependency="afterok:$prepare" --kill-on-invalid-dep=yes "$script" | cut -d";" -f1)',
             '  echo "${script%.sbatch}: job $id"', "done"]
    path = out_dir / "submit.sh"
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o755)


def write_sweep_from_options(options: LaunchOptions, run_name: str, run_dir: Path) -> Path:
    """`write_sweep` with a `langadapt launch --sweep`'s options (nodes and GPUs per node from the
    recipe's cluster, `LaunchOptions.from_args`)."""
    gpus = options.gpus_per_node or (PRESETS[options.preset].tasks_per_node)
    points = sweep_points(parse_sweep(list(options.sweep)), options.nodes, gpus, options.preset)
    out = options.out or run_dir.parent / f"{run_name}-sweep"
    return write_sweep(options.recipe, points, run_name=run_name, run_dir=run_dir, out_dir=out,
                       steps=DEFAULT_STEPS if options.steps is None else options.steps,
                       warmup_steps=DEFAULT_WARMUP if options.warmup_steps is None else options.warmup_steps,
                       prepare_nodes=options.nodes, run_args=list(options.run_args), job_name=options.job_name,
                       time=options.time or DEFAULT_TIME, **sbatch_options(options))


def measure(run_dir: Path, warmup_steps: int) -> dict[str, object]:
    """Status and throughput of one configuration's stage 2 (median over the steps after warm-up)."""
    layout = RunLayout(run_dir)
    stage2 = layout.stage2
    rows = [row for row in read_metrics(stage2.metrics).train
            if "tokens_per_second" in row and row["step"] > warmup_steps]
    if not (stage2.root / MARKER).is_file() or not rows:
        return {"status": "incomplete" if stage2.root.is_dir() else "not started"}
    summary = layout.stage_summary("stage2")
    mfus = [row["mfu"] for row in rows if row.get("mfu") is not None]
    return {"status": "ok", "world_size": summary.get("world_size"), "steps_measured": len(rows),
            "tokens_per_second": statistics.median(row["tokens_per_second"] for row in rows),
            "mfu": statistics.median(mfus) if mfus else None}


def _job_exit(logs: Path, job_name: str) -> int | None:
    """The exit status of the last step of the newest job log of `job_name`, if a step ended."""
    found = sorted(logs.glob(f"{job_name}-*.out"), key=lambda p: p.stat().st_mtime)
    codes = _STEP_EXIT.findall(found[-1].read_text(errors="replace")) if found else []
    return int(codes[-1]) if codes else None


def collect(sweep_dir: str | Path) -> dict[str, object]:
    """The report of a sweep folder: every configuration with its status, tokens/s, tokens/s per
    GPU and efficiency against the smallest completed configuration."""
    sweep_dir = Path(sweep_dir)
    if not (sweep_dir / SWEEP_FILE).is_file():
        raise LangadaptError(f"sweep-report: {sweep_dir} is not a sweep folder (no {SWEEP_FILE}; "
                             "write one with langadapt launch RECIPE --slurm --sweep ...)")
    sweep = json.loads((sweep_dir / SWEEP_FILE).read_text())
    rows = []
    for config in sweep["configurations"]:
        row = {k: config[k] for k in ("name", "nodes", "gpus_per_node")}
        row.update(measure(Path(config["run_dir"]), sweep["warmup_steps"]))
        code = _job_exit(sweep_dir / "logs", config["job_name"])
        if row["status"] != "ok" and code not in (None, 0):
            row["status"] = f"failed (exit {code})"
        elif row["status"] == "ok" and row["world_size"] != config["world_size"]:
            row["status"] = f"wrong world size (expected {config['world_size']})"
        if row["status"] == "ok":
            row["tokens_per_second_per_gpu"] = row["tokens_per_second"] / row["world_size"]
        rows.append(row)
    done = [r for r in rows if r["status"] == "ok"]
    baseline = min(done, key=lambda r: (r["world_size"], r["nodes"]), default=None)
    for row in done:
        row["efficiency"] = row["tokens_per_second_per_gpu"] / baseline["tokens_per_second_per_gpu"]
    prepare = _job_exit(sweep_dir / "logs", sweep["prepare"]["job_name"])
    return {"sweep": str(sweep_dir.resolve()), "steps": sweep["steps"], "warmup_steps": sweep["warmup_steps"],
            "prepare_exit": prepare, "baseline": baseline["name"] if baseline else None, "configurations": rows}


def render_report(report: dict[str, object]) -> str:
    """The report as a Markdown table (what `sweep-report` prints)."""
    baseline = report["baseline"] or "(none completed)"
    lines = [f"scaling sweep {report['sweep']}: median over steps {report['warmup_steps'] + 1}..{report['steps']}, "
             + f"efficiency = tokens/s per GPU / that of {baseline}"]
    if report["prepare_exit"] not in (None, 0):
        lines.append(f"preparation job failed (exit {report['prepare_exit']}): see {report['sweep']}/logs")
    lines += ["", "| config | nodes | GPUs/node | world | tokens/s | tokens/s/GPU | efficiency | MFU | status |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in report["configurations"]:
        ok = r["status"] == "ok"
        numbers = [f"{r['tokens_per_second']:,.0f}", f"{r['tokens_per_second_per_gpu']:,.0f}",
                   f"{r['efficiency']:.2f}"] if ok else ["-"] * 3
        mfu = f"{r['mfu']:.1%}" if ok and r["mfu"] is not None else "-"
        world = r.get("world_size") or r["nodes"] * r["gpus_per_node"]
        lines.append(f"| {r['name']} | {r['nodes']} | {r['gpus_per_node']} | {world} | {' | '.join(numbers)} "
                     f"| {mfu} | {r['status']} |")
    return "\n".join(lines)


def write_report(sweep_dir: str | Path) -> tuple[str, Path]:
    """Collect, write `report.json` into the sweep folder, and return the table and that path."""
    report = collect(sweep_dir)
    path = Path(sweep_dir) / REPORT_FILE
    path.write_text(json.dumps(report, indent=1))
    return render_report(report), path
