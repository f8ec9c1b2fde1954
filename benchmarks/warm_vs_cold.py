"""Does a warm start beat training from scratch at equal compute, and which knobs widen the gap?

Runs the variants of recipes/experiments/warm_vs_cold.yaml (the demo recipe plus `--set`
overrides) through the real pipeline, each in runs/experiments/<variant>/, and scores every
checkpoint on held-out text: bits per byte for nb (target), nn (the other written Norwegian, in
no training data), en (forgetting), sv and da (neighbours). Every variant spends the FLOPs of the
demo's warm run (a stage-1 step is discounted to 4N + 2N_head of a full step's 6N FLOPs per
token; see langadapt.evaluation.cold_twin) on the same target-language data.

    python benchmarks/warm_vs_cold.py [--groups core,replay,stage1,tokenizer] [--jobs 2]
    python benchmarks/warm_vs_cold.py --report        # table, plot and JSON line from the results
    python benchmarks/warm_vs_cold.py --smoke         # seconds: the driver's planning and the report (CI)

`--smoke` trains nothing (a run needs the demo's English base, minutes to build): it computes every
variant's `--set` list and equal-compute stage-2 steps and validates each against the recipe
schema, as the driver does before launching (the base's dims from its config, else from its build
recipe's architecture), then prints the report of the stored results with the plot written to a
temporary file.

Each finished run is merged into benchmarks/results/warm_vs_cold.json at once, so a run cut off
keeps what it measured; variants already there are skipped (pass --rerun to repeat them).
Prints a table and, last, one JSON line: value = the best warm variant's final nb bits per byte,
baseline = the best cold variant's (over the cold learning rates tried), ratio = warm/cold.
Each run is one process with one thread: on shared, oversubscribed cores that is the fastest
(see benchmarks/embedding_init.py), and --jobs 2 keeps both cores busy.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from langadapt.evaluation.cold_twin import equal_compute_stage2_steps, run_flops, step_flops
from langadapt.planning.models import ModelDims, dims_from_config, load_model_dims
from langadapt.planning.training import global_batch
from langadapt.recipe import Recipe, load_recipe

PLAN = REPO / "recipes" / "experiments" / "warm_vs_cold.yaml"
RESULTS = REPO / "benchmarks" / "results" / "warm_vs_cold.json"
PLOT = REPO / "benchmarks" / "results" / "warm_vs_cold.png"
LANGS = ("nb", "nn", "en", "sv", "da")


def load_plan(path: Path = PLAN) -> dict[str, Any]:
    plan = yaml.safe_load(path.read_text(encoding="utf-8"))
    for variant in plan["variants"].values():
        variant.setdefault("set", [])
        variant.setdefault("equal_compute", True)
        variant.setdefault("group", "other")
    return plan


def run_name(variant: str, seed: int, default_seed: int) -> str:
    return variant if seed == default_seed else f"{variant}_s{seed}"


def variant_overrides(plan: dict[str, Any], variant: str, seed: int, default_seed: int,
                      best_init: str | None = None) -> list[str]:
    """The `--set` items of one run, without the compute-equalising stage-2 steps."""
    spec = plan["variants"][variant]
    items = [*plan["common"], *spec["set"], f"name={run_name(variant, seed, default_seed)}", f"seed={seed}"]
    if spec.get("init_from_best"):
        if best_init is None:
            raise ValueError(f"{variant}: needs the best warm init, and no warm variant has finished")
        items.append(f"embeddings.method={best_init}")
        if best_init == "focus":
            items.append("embeddings.fasttext_workers=1")
    return items


def recipe_dims(recipe: Recipe):
    """The dims a run trains: its base model's config with its tokenizer's vocabulary size (what
    `cold_twin_recipe` reads from the run's step-0 model)."""
    return load_model_dims(REPO / recipe.base_model.path).with_vocab(recipe.tokenizer.vocab_size)


def reference_recipe(plan: dict[str, Any]) -> Recipe:
    """The demo recipe with the common overrides: its schedule defines every run's compute."""
    return load_recipe(REPO / plan["recipe"], plan["common"]).recipe


def with_equal_compute(plan: dict[str, Any], variant: str, items: list[str], dims_of=recipe_dims) -> list[str]:
    """`items` plus the stage-2 steps that make the variant spend the FLOPs the demo's schedule
    spends on the variant's own model (unless the variant opts out)."""
    if not plan["variants"][variant]["equal_compute"]:
        return items
    recipe = load_recipe(REPO / plan["recipe"], items).recipe
    dims = dims_of(recipe)
    budget = run_flops(dims, reference_recipe(plan))
    return [*items, f"stage2.steps={equal_compute_stage2_steps(budget, dims, recipe)}"]


def best_warm_init(results: dict[str, Any], plan: dict[str, Any]) -> str | None:
    """The embeddings.method of the finished core warm variant with the lowest final nb bpb."""
    scored = []
    for run in results.get("runs", {}).values():
        spec = plan["variants"].get(run["variant"], {})
        if spec.get("group") == "core" and run["init"] == "warm" and not spec.get("init_from_best") \
                and run["stage1_steps"] > 0 and run["seed"] == results["meta"]["default_seed"]:
            scored.append((run["final"]["nb"], run["method"]))
    return min(scored)[1] if scored else None


def summary_line(results: dict[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    """The last-line JSON (benchmarks/README.md): the best warm core variant's final nb bpb over the best cold one's.

    Core variants only (default seed): there warm and cold differ in nothing but the init, the
    compute is equal and the model is the demo's; sweeps change the data or the model too."""
    seed = results["meta"]["default_seed"]
    runs = [r for r in results.get("runs", {}).values()
            if r["seed"] == seed and plan["variants"].get(r["variant"], {}).get("group") == "core"]
    warm = [r["final"]["nb"] for r in runs if r["init"] == "warm"]
    cold = [r["final"]["nb"] for r in runs if r["init"] == "scratch"]
    value, baseline = (min(warm) if warm else None), (min(cold) if cold else None)
    ratio = round(value / baseline, 4) if value and baseline else None
    return {"benchmark": "warm_vs_cold", "metric": "nb_bpb_warm_over_cold", "value": value,
            "baseline": baseline, "ratio": ratio, "unit": "bits/byte"}


def seed_spread(results: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Final nb bits per byte over the seeds of each variant run with more than one seed."""
    by_variant: dict[str, list[float]] = {}
    for run in results.get("runs", {}).values():
        by_variant.setdefault(run["variant"], []).append(run["final"]["nb"])
    return {variant: {"seeds": len(v), "mean": round(sum(v) / len(v), 4), "min": min(v), "max": max(v)}
            for variant, v in by_variant.items() if len(v) > 1}


def nb_at_flops(curve: list[dict[str, Any]], flops: float) -> float:
    """nb bits per byte of a learning curve at `flops`, linearly interpolated between checkpoints."""
    points = [(p["flops"], p["bpb"]["nb"]) for p in curve]
    if flops <= points[0][0]:
        return points[0][1]
    for (f0, b0), (f1, b1) in pairwise(points):
        if flops <= f1:
            return b0 + (b1 - b0) * (flops - f0) / (f1 - f0)
    return points[-1][1]


def flops_to_reach(curve: list[dict[str, Any]], target: float) -> float | None:
    """The FLOPs at which a curve's nb bits per byte first reaches `target` (interpolated), or None."""
    for before, after in pairwise(curve):
        b0, b1 = before["bpb"]["nb"], after["bpb"]["nb"]
        if b1 <= target < b0:
            return before["flops"] + (after["flops"] - before["flops"]) * (b0 - target) / (b0 - b1)
    return 0.0 if curve and curve[0]["bpb"]["nb"] <= target else None


# --- one run (in a worker process) -------------------------------------------------------------

def score_checkpoints(run_dir: Path, langs: tuple[str, ...], max_bytes: int, recipe: Recipe,
                      dims) -> list[dict[str, Any]]:
    """bpb of the step-0 model and of every kept checkpoint, with tokens and FLOPs spent so far."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from langadapt.run.layout import RunLayout

    layout = RunLayout(run_dir)
    texts = held_out(run_dir, langs, max_bytes)
    tokenizer = AutoTokenizer.from_pretrained(layout.embeddings.model)
    model = AutoModelForCausalLM.from_pretrained(layout.embeddings.model, dtype=torch.float32).eval()
    stages = [("stage1", recipe.stage1)] if recipe.init == "warm" and recipe.stage1.enabled else []
    stages.append(("stage2", recipe.stage2))
    points, tokens, flops = [("init", 0, model.state_dict())], 0.0, 0.0
    per_stage: list[tuple[str, int, float, float]] = [("init", 0, 0.0, 0.0)]
    for stage, config in stages:
        step_tokens = global_batch(config, world_size=1) * config.seq_len
        for ckpt in sorted(layout.trained(stage).checkpoints.glob("step_*")):
            step = int(ckpt.name.split("_")[1])
            points.append((stage, step, ckpt / "model.safetensors"))
            per_stage.append((stage, step, tokens + step * step_tokens, flops + step * step_flops(dims, stage, config)))
        tokens += config.steps * step_tokens
        flops += config.steps * step_flops(dims, stage, config)
    curve = []
    for (stage, step, weights), (_, _, seen, spent) in zip(points, per_stage):
        if not isinstance(weights, dict):
            model.load_state_dict(load_file(weights))
        bpb = score(model, tokenizer, texts)
        curve.append({"stage": stage, "step": step, "tokens": int(seen), "flops": spent, "bpb": bpb})
        print(f"  {run_dir.name} {stage} step {step}: {bpb}", file=sys.stderr, flush=True)
    return curve


def source_passes(run_dir: Path, stages: list[str]) -> dict[str, dict[str, float]]:
    """Tokens and passes (epochs) per trained source, summed over `stages`, as the data stream
    counted them (the last metrics row of each stage; see langadapt.data.stream.PackedStream.progress).

    The epochs sweep reports these rather than the passes it aimed at: document lengths and the
    stream's packing make the measured number the honest one."""
    from langadapt.run.layout import RunLayout

    layout, seen = RunLayout(run_dir), {}
    for stage in stages:
        rows = [json.loads(line) for line in layout.trained(stage).metrics.read_text().splitlines() if line.strip()]
        last = [r for r in rows if r.get("epochs_by_source")][-1]
        for source, tokens in last["tokens_by_source"].items():
            entry = seen.setdefault(source, {"tokens": 0, "epochs": 0.0})
            entry["tokens"] += tokens
            entry["epochs"] = round(entry["epochs"] + last["epochs_by_source"][source], 3)
    return seen


def held_out(run_dir: Path, langs: tuple[str, ...], max_bytes: int) -> dict[str, list[str]]:
    """The run's held-out documents per language, the leading `max_bytes` of each language."""
    from langadapt.data.documents import texts_by_lang
    from langadapt.evaluation.task_data import cap_bytes
    from langadapt.run.layout import RunLayout

    texts = texts_by_lang(RunLayout(run_dir).data.root, "valid")
    return {lang: cap_bytes(texts[lang], max_bytes) for lang in langs if lang in texts}


def score(model, tokenizer, texts: dict[str, list[str]]) -> dict[str, float]:
    from langadapt.evaluation.bpb import bits_per_byte

    return {lang: round(bits_per_byte(model, tokenizer, t, window=256, stride=256)["bits_per_byte"], 4)
            for lang, t in texts.items()}


def score_base(base_model: Path, run: dict[str, Any], args) -> dict[str, float]:
    """The English base model (its own tokenizer) on the same held-out text: the forgetting reference."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(args.threads)
    name = run_name(run["variant"], run["seed"], run["seed"])
    texts = held_out(REPO / "runs" / "experiments" / name, LANGS, args.eval_bytes)
    model = AutoModelForCausalLM.from_pretrained(base_model, dtype=torch.float32).eval()
    return score(model, AutoTokenizer.from_pretrained(base_model), texts)


def worker(args: argparse.Namespace) -> None:
    """Run one variant's pipeline and score it; print its result as one JSON line."""
    import logging

    import torch

    from langadapt.pipeline.runner import run_pipeline

    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    items = json.loads(args.worker)
    loaded = load_recipe(REPO / args.recipe, items)
    started = time.time()
    run_pipeline(loaded)
    train_s = time.time() - started
    recipe = loaded.recipe
    dims = recipe_dims(recipe)
    curve = score_checkpoints(recipe.run_dir, LANGS, args.eval_bytes, recipe, dims)
    stages = ["stage1"] if recipe.init == "warm" and recipe.stage1.enabled else []
    passes = source_passes(recipe.run_dir, [*stages, "stage2"])
    print(json.dumps({
        "init": recipe.init, "method": recipe.embeddings.method if recipe.init == "warm" else "scratch",
        "stage1_steps": recipe.stage1.steps if recipe.init == "warm" and recipe.stage1.enabled else 0,
        "stage2_steps": recipe.stage2.steps, "flops": run_flops(dims, recipe), "seed": recipe.seed,
        "overrides": items, "pipeline_seconds": round(train_s, 1), "curve": curve, "final": curve[-1]["bpb"],
        "sources": passes,
    }))


# --- the driver ---------------------------------------------------------------------------------

def load_results(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"runs": {}}


def merge_results(path: Path, meta: dict[str, Any], runs: dict[str, Any]) -> dict[str, Any]:
    """Merge `meta` and `runs` into the results file and return its new content.

    Read-merge-write under a lock, so drivers started side by side (e.g. one per core with
    different --only lists) never drop each other's runs; written to a temporary file first."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        results = load_results(path)
        results.setdefault("meta", {}).update(meta)
        results["runs"].update(runs)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(results, indent=1), encoding="utf-8")
        os.replace(tmp, path)
    return results


def launch(args, plan, variant: str, seed: int, log_dir: Path) -> dict | None:
    results = load_results(args.results)  # the latest: another driver may have finished runs
    default_seed = results["meta"]["default_seed"]
    items = variant_overrides(plan, variant, seed, default_seed, best_warm_init(results, plan))
    items = with_equal_compute(plan, variant, items)
    name = run_name(variant, seed, default_seed)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(items),
           "--threads", str(args.threads), "--eval-bytes", str(args.eval_bytes)]
    print(f"[{time.strftime('%H:%M:%S')}] {name}: langadapt run {plan['recipe']} "
          + " ".join(f"--set {i}" for i in items), flush=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONPATH": str(REPO)}
    with open(log_dir / f"{name}.log", "w") as log:
        done = subprocess.run(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=log, text=True, check=False)
    if done.returncode != 0:
        print(f"[{time.strftime('%H:%M:%S')}] {name}: FAILED (see {log_dir / (name + '.log')})", flush=True)
        return None
    run = {"variant": variant, **json.loads(done.stdout.strip().splitlines()[-1])}
    if plan["variants"][variant].get("init_from_best"):
        run["best_init_of"] = sorted({r["method"] for r in results["runs"].values()
                                      if r["init"] == "warm" and r["stage1_steps"] > 0})
    print(f"[{time.strftime('%H:%M:%S')}] {name}: final {run['final']} in {run['pipeline_seconds']} s", flush=True)
    return run


def print_table(results: dict[str, Any], plan: dict[str, Any]) -> None:
    runs, meta = results.get("runs", {}), results.get("meta", {})
    cold = summary_line(results, plan)["baseline"]
    budget = meta.get("budget_flops") or 1.0
    print(f"\nheld-out bits per byte after training; compute in units of the demo's warm run "
          f"({budget:.3g} FLOPs; a stage-1 step = {meta.get('stage1_step_cost', 0):.2f} stage-2 steps)")
    print(f"{'run':22s} {'group':9s} {'s1':>4s} {'s2':>4s} {'FLOPs':>5s} "
          + " ".join(f"{lang:>6s}" for lang in LANGS) + "  nb/cold")
    for name, run in runs.items():
        final = run["final"]
        rel = f"{final['nb'] / cold:.3f}" if cold else "-"
        group = plan["variants"].get(run["variant"], {}).get("group", "?")
        print(f"{name:22s} {group:9s} {run['stage1_steps']:4d} {run['stage2_steps']:4d} {run['flops'] / budget:5.2f} "
              + " ".join(f"{final.get(lang, float('nan')):6.3f}" for lang in LANGS) + f"  {rel:>7s}")
    cold_run = min((r for r in runs.values() if r["init"] == "scratch" and r["final"]["nb"] == cold),
                   key=lambda r: r["final"]["nb"], default=None)
    if cold_run:
        print(f"\ncore warm runs against {cold_run['variant']} at equal FLOPs along the way (nb warm/cold), "
              "and the share of the budget each needs to reach cold's final nb:")
        for name, run in runs.items():
            if run["init"] != "warm" or plan["variants"].get(run["variant"], {}).get("group") != "core":
                continue
            along = [f"{p['flops'] / budget:.2f}: {p['bpb']['nb'] / nb_at_flops(cold_run['curve'], p['flops']):.3f}"
                     for p in run["curve"][1:]]
            reach = flops_to_reach(run["curve"], cold)
            print(f"  {name:20s} reaches cold's {cold:.3f} at {reach / budget if reach is not None else float('nan'):.2f}"
                  f" of the budget; ratio at " + ", ".join(along))
    passes = {name: run["sources"] for name, run in runs.items() if "sources" in run}
    if passes:
        print("\ntraining tokens and passes per source, as the data stream counted them (stages summed):")
        for name, sources in passes.items():
            print(f"  {name:20s} " + ", ".join(f"{source} {seen['tokens'] / 1e3:.0f}k ({seen['epochs']:.2f} ep)"
                                               for source, seen in sources.items()))
    for variant, spread in seed_spread(results).items():
        print(f"  {variant}: nb over {spread['seeds']} seeds mean {spread['mean']:.3f}, "
              f"range {spread['min']:.3f}-{spread['max']:.3f}")
    if meta.get("base"):
        print(f"{'base (English model)':22s} {'':9s} {'':4s} {'':4s} {'':5s} "
              + " ".join(f"{meta['base'].get(lang, float('nan')):6.3f}" for lang in LANGS))


def plot(results: dict[str, Any], plan: dict[str, Any], path: Path) -> None:
    """Bits per byte against tokens seen (default seed): nb and en of the core set, nb of the sweeps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seed = results["meta"]["default_seed"]
    panels = [("core", "nb", "core set: nb (target)"), ("core", "en", "core set: en (forgetting)"),
              ("sweeps", "nb", "sweeps: nb (target)"), ("sweeps", "en", "sweeps: en (forgetting)")]
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    for ax, (which, lang, title) in zip(axes.flat, panels):
        for name, run in results["runs"].items():
            core = plan["variants"].get(run["variant"], {}).get("group") == "core"
            if run["seed"] != seed or core != (which == "core"):
                continue
            style = "--" if run["init"] == "scratch" else "-"
            ax.plot([p["tokens"] / 1e3 for p in run["curve"]], [p["bpb"][lang] for p in run["curve"]],
                    style, marker=".", label=name)
        if lang == "en" and results["meta"].get("base"):
            ax.axhline(results["meta"]["base"]["en"], color="grey", lw=0.8, label="English base")
        ax.set(xlabel="training tokens seen (thousands)", ylabel="held-out bits per byte", title=title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--plan", type=Path, default=PLAN)
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--groups", default="core", help="comma-separated groups of the plan to run, in order")
    ap.add_argument("--only", default=None, help="comma-separated variant names (instead of --groups)")
    ap.add_argument("--seeds", default=None, help="comma-separated seeds (default: the recipe's)")
    ap.add_argument("--jobs", type=int, default=2, help="runs at once (one thread each)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--eval-bytes", type=int, default=16000, help="held-out UTF-8 bytes scored per language")
    ap.add_argument("--rerun", action="store_true", help="run variants already in the results again")
    ap.add_argument("--report", action="store_true", help="only print the table, plot and JSON line")
    ap.add_argument("--smoke", action="store_true",
                    help="every variant's overrides checked, then the report (plot to a temporary file): seconds (CI)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--recipe", default=str(PLAN.parent.parent / "tiny_norwegian_warm.yaml"), help=argparse.SUPPRESS)
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    if args.worker is not None:
        worker(args)
        return
    plan = load_plan(args.plan)
    if args.smoke:
        smoke(args, plan)
        return
    results = load_results(args.results)
    if not args.report:
        run_all(args, plan, results)
    print_table(results, plan)
    if results.get("runs"):
        plot(results, plan, PLOT)
        print(f"plot: {PLOT.relative_to(REPO)}")
    print(json.dumps(summary_line(results, plan)))


def unbuilt_dims(recipe: Recipe) -> ModelDims:
    """`recipe_dims` without building the base: its config where it exists, else its build recipe's architecture."""
    path = REPO / (recipe.base_model.path or "")
    if recipe.base_model.path and (path / "config.json").is_file():
        return recipe_dims(recipe)
    if recipe.base_model.build_recipe is None:
        raise ValueError(f"{recipe.name}: base model {path} not found and no build_recipe")
    built = load_recipe(REPO / recipe.base_model.build_recipe).recipe
    return dims_from_config({**built.base_model.architecture, "vocab_size": recipe.tokenizer.vocab_size},
                            name=built.name)


def smoke(args, plan: dict[str, Any]) -> None:
    """--smoke: every variant's overrides as `launch` builds them, validated; then the report."""
    import tempfile

    default_seed = reference_recipe(plan).seed
    for variant in plan["variants"]:
        items = variant_overrides(plan, variant, default_seed, default_seed, best_init="mean")
        try:
            items = with_equal_compute(plan, variant, items, dims_of=unbuilt_dims)
        except ValueError as error:  # a base in ../shared, which this machine lacks
            print(f"{variant}: equal-compute steps not checked: {error}")
        recipe = load_recipe(REPO / plan["recipe"], items).recipe
        print(f"{variant}: {recipe.init}, stage 2 {recipe.stage2.steps} steps")
    print(f"{len(plan['variants'])} variants: overrides valid")
    results = load_results(args.results)
    print_table(results, plan)
    if results.get("runs"):
        with tempfile.TemporaryDirectory() as tmp:
            plot(results, plan, Path(tmp) / "warm_vs_cold.png")
            print(f"plot: {len(results['runs'])} runs drawn")
    print(json.dumps(summary_line(results, plan)))


def run_all(args, plan: dict[str, Any], results: dict[str, Any]) -> None:
    reference = reference_recipe(plan)
    from langadapt.pipeline.runner import prepare_base_model

    base_model = Path(prepare_base_model(reference))  # the demo's base is built once, here
    dims = recipe_dims(reference)
    budget = run_flops(dims, reference)
    results.update(merge_results(args.results, {
        "plan": str(args.plan.relative_to(REPO)), "default_seed": reference.seed, "budget_flops": budget,
        "stage1_step_cost": step_flops(dims, "stage1", reference.stage1) / step_flops(dims, "stage2", reference.stage2),
        "eval_bytes_per_lang": args.eval_bytes, "langs": list(LANGS),
    }, {}))
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else [reference.seed]
    names = args.only.split(",") if args.only else \
        [n for g in args.groups.split(",") for n, v in plan["variants"].items() if v["group"] == g]
    # In the plan's order: a variant that takes the best warm init comes after the warm ones and
    # picks the best of those finished when it starts (the run records which were compared).
    todo = [(n, s) for s in seeds for n in names
            if args.rerun or run_name(n, s, reference.seed) not in results["runs"]]
    log_dir = REPO / "runs" / "experiments" / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)

    def one(item: tuple[str, int]) -> None:
        variant, seed = item
        run = launch(args, plan, variant, seed, log_dir)
        if run is not None:
            results.update(merge_results(args.results, {}, {run_name(variant, seed, reference.seed): run}))

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        list(pool.map(one, todo))
    if "base" not in results["meta"] and results["runs"]:
        base = score_base(base_model, next(iter(results["runs"].values())), args)
        results.update(merge_results(args.results, {"base": base}, {}))


if __name__ == "__main__":
    main()
