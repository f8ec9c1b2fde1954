"""`langadapt run`, `plan`, `frontier` and `reference`: the commands that run, plan or document a recipe.

`run --dry-run` prints the plan, each stage's action and every problem at once (`_dry_run`),
so a cluster recipe checked on a laptop shows all of them, not the first.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from langadapt.errors import EXIT_USER_ERROR, LangadaptError

if TYPE_CHECKING:
    from langadapt.recipe import LoadedRecipe, Recipe


def cmd_run(args: argparse.Namespace) -> int:
    from langadapt.pipeline.runner import run_pipeline
    from langadapt.recipe import Recipe, load_recipe
    from langadapt.recipe.reference import explain

    if args.json and not args.dry_run:
        raise LangadaptError("--json goes with --dry-run (a run's results are in its folder)")
    loaded = load_recipe(args.recipe, args.overrides)
    if args.explain:
        print(explain(Recipe, loaded.recipe.model_dump(mode="json")))
        return 0
    if args.dry_run:
        return _dry_run(args, loaded)
    actions = run_pipeline(loaded, only=args.only, start=args.start, until=args.until,
                           force=args.force or None, overwrite=args.overwrite)
    print(run_outcome(args, loaded.recipe.run_dir, actions))
    return 0


def run_outcome(args: argparse.Namespace, run_dir: Path, actions: list[tuple[str, str]]) -> str:
    """The last line of `langadapt run`: what it did, and what is left to run.

    "run complete" after `--until tokenizer` told the user the model was ready when it was not
    even trained; a partial selection says where it stopped, why, and the command that goes on."""
    left = [name for name, action in actions if action == "not selected"]
    if not left:
        return f"run complete: {run_dir}"
    if args.only:
        done = f"ran only {args.only} (as --only asked)"
    elif args.until:
        done = f"stopped after {args.until} (as --until asked)"
    else:  # --from a stage whose predecessors are not complete is refused before this
        done = "ran the selected stages"
    sets = "".join(f" --set {shlex.quote(item)}" for item in args.overrides)
    return (f"{done}: {run_dir}; not run yet: {', '.join(left)}; "
            f"next: langadapt run {shlex.quote(str(args.recipe))}{sets}")


def source_lines(recipe: Recipe) -> list[str]:
    """Each source in one line; where a replay share re-weights a stage's mixture, the weight that
    stage streams it at (a source's own `weight 1` is only its part within its role then)."""
    from langadapt.recipe.replay import stage_mixture, stage_replay

    mixes = {}
    for name in recipe.training_stages:
        stage = getattr(recipe, name)
        if stage_replay(recipe.data, name, stage)[0] is not None:
            try:
                mixes[name] = stage_mixture(recipe.data, name, stage)
            except LangadaptError:  # a share that cannot be honoured: a problem the dry run reports
                continue
    lines = []
    for source in recipe.data.sources:
        by_weight: dict[float, list[str]] = {}
        for name, mix in mixes.items():
            if source.name in mix and mix[source.name]["weight"] != source.effective_weight:
                by_weight.setdefault(round(mix[source.name]["weight"], 4), []).append(name)
        streamed = ", ".join(f"{weight:g} in {' and '.join(names)}" for weight, names in by_weight.items())
        lines.append(source.describe() + (f" (with the replay share: weight {streamed})" if streamed else ""))
    return lines


def _dry_run(args: argparse.Namespace, loaded: LoadedRecipe) -> int:
    """The plan, the stage actions and every problem at once; non-zero exit if there is any.

    Users check a cluster recipe on a laptop first: one missing corpus must not hide the plan
    or the next problem."""
    from langadapt.pipeline.runner import dry_run, planned_dependencies
    from langadapt.planning.plan import render_plan
    from langadapt.planning.recipe_plan import plan_recipe

    actions, report = dry_run(loaded, only=args.only, start=args.start, until=args.until, force=args.force or None)
    plan = None
    try:
        plan = plan_recipe(loaded.recipe)
    except LangadaptError as exc:  # a consequence of a problem found already (no base model), or one more
        if not report.problems:
            report.add_line(str(exc))
    problems = report.lines()
    sources = source_lines(loaded.recipe)
    dependencies = planned_dependencies(loaded.recipe)
    if args.json:
        print(json.dumps({"recipe": str(args.recipe), "run_dir": str(loaded.recipe.run_dir), "valid": not problems,
                          "stages": dict(actions), "depends_on": dependencies, "sources": sources, "plan": plan,
                          "problems": problems}, indent=2))
    else:
        print(render_plan(plan) if plan is not None else "plan: not known until the problems below are fixed", end="\n\n")
        print(f"recipe {args.recipe}: {'valid' if not problems else 'NOT valid'}; run directory {loaded.recipe.run_dir}")
        for name, action in actions:
            print(f"  {name:<11} {action}")
        if dependencies:
            print("runs it depends on:")
            for line in dependencies:
                print(f"  {line}")
        print("sources:")
        for line in sources:
            print(f"  {line}")
        for line in problems:
            print(f"langadapt: error: {line}", file=sys.stderr)
        if problems:
            print(f"langadapt: {len(problems)} problem(s) would stop this run", file=sys.stderr)
    return EXIT_USER_ERROR if problems else 0


def cmd_plan(args: argparse.Namespace) -> int:
    from langadapt.planning.plan import render_plan
    from langadapt.planning.recipe_plan import plan_recipe
    from langadapt.recipe import load_recipe

    loaded = load_recipe(args.recipe, args.overrides)
    plan = plan_recipe(loaded.recipe)
    print(json.dumps(plan, indent=2) if args.json else render_plan(plan))
    return 0



def cmd_frontier(args: argparse.Namespace) -> int:
    from langadapt.experiments.frontier import MARKDOWN_FILE, run_frontier

    folder = run_frontier(args.recipe, args.grid, args.out, args.overrides)
    print(f"frontier complete: {folder / MARKDOWN_FILE}")
    return 0


def cmd_reference(args: argparse.Namespace) -> int:
    from langadapt.recipe import Recipe
    from langadapt.recipe.reference import markdown_reference

    print(markdown_reference(Recipe))
    return 0
