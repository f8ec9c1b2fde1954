"""The `langadapt` command: thin argument parsing over pipeline, plan, eval, export and launch.

New knobs belong in the recipe (and `--set key.path=value`), not here. User errors are printed as
one line and exit with status 2; `--debug` shows tracebacks.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from langadapt.errors import LangadaptError
from langadapt.ioerrors import os_error_line
from langadapt.runtime.signals import REQUEUE_EXIT_CODE, Preempted, latch_stop_signals

EXIT_USER_ERROR = 2

if TYPE_CHECKING:
    from langadapt.recipe import LoadedRecipe, Recipe


def _recipe_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recipe", help="recipe YAML file")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="override a recipe value (repeatable), e.g. --set stage2.steps=100")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="langadapt", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run the pipeline of a recipe")
    _recipe_args(run)
    run.add_argument("--from", dest="start", metavar="STAGE", help="re-run this stage and the ones after it")
    run.add_argument("--only", metavar="STAGE", help="re-run only this stage (earlier ones must be complete)")
    run.add_argument("--until", metavar="STAGE", help="stop after this stage")
    run.add_argument("--force", action="store_true", help="re-run stages even when complete")
    run.add_argument("--dry-run", action="store_true",
                     help="print the plan, what each stage would do and every problem that would stop the run")
    run.add_argument("--json", action="store_true", help="with --dry-run: print it as JSON")
    run.add_argument("--explain", action="store_true", help="print the resolved recipe with every field's meaning")
    run.add_argument("--overwrite", action="store_true", help="let the export replace an exported folder edited by hand")

    plan = commands.add_parser("plan", help="tokens, epochs, FLOPs, GPU-hours, memory and energy of a recipe")
    _recipe_args(plan)
    plan.add_argument("--json", action="store_true", help="print JSON instead of a table")

    ev = commands.add_parser("eval", help="evaluate a run directory or a Hugging Face model folder")
    ev.add_argument("model", help="the adapted model: run directory (runs/<name>) or HF model folder")
    ev.add_argument("--suite", action="append", default=None, help="suite YAML (repeatable)")
    ev.add_argument("--name", default=None, help="the model folder's name in the report (default: RUN/STAGE it "
                                                 "came from, else the folder name)")
    ev.add_argument("--out", default=None, help="output folder (default: RUN/eval, or ./eval_NAME for a model folder)")
    ev.add_argument("--compare", action="extend", nargs="+", default=[], metavar="[NAME=]PATH",
                    help="reference models (run dirs or HF folders): deltas are against the first")
    ev.add_argument("--overwrite", action="store_true", help="replace an existing results.json in the output folder")
    ev.add_argument("--texts", action="append", default=[], metavar="LANG=FILE",
                    help="held-out text for LANG's bits per byte (repeatable): .txt (a paragraph a document), "
                         ".jsonl with a `text` field, .json or .parquet; plain, .gz or .zst; scored as read, "
                         "instead of the run's held-out data for that language")
    ev.add_argument("--text-field", default="text", metavar="FIELD",
                    help="the field holding the text in --texts .jsonl/.json/.parquet files (default: text)")
    ev.add_argument("--max-bytes", default=None, metavar="N|all", type=_max_bytes,
                    help="held-out bytes scored per language, --texts and the run's alike (default: the "
                         "recipe's evaluation.max_bytes_per_lang); `all` scores every byte")

    export = commands.add_parser("export", help="(re-)export a run's model folder and card, optionally push")
    _recipe_args(export)
    export.add_argument("--push-to-hub", metavar="REPO_ID", help="push the exported folder to this Hub repo")
    export.add_argument("--revision", metavar="BRANCH", help="push to this branch of the repo (default: main; "
                        "for --checkpoint: STAGE-stepN)")
    export.add_argument("--checkpoint", metavar="STAGE/STEP", help="export this saved checkpoint instead of the "
                        "final model, e.g. stage2/500 (into RUN/exported_checkpoints/)")
    export.add_argument("--overwrite", action="store_true", help="re-export even over an existing exported folder")

    launch = commands.add_parser("launch", help="write the sbatch scripts of a multi-node run: CPU preparation, "
                                 "then GPU training")
    _recipe_args(launch)
    launch.add_argument("--slurm", action="store_true", required=True, help="write Slurm batch scripts")
    launch.add_argument("--dry-run", action="store_true",
                        help="print the scripts and how they are submitted; write nothing")
    from langadapt.runtime.launch_options import add_launch_arguments

    add_launch_arguments(launch)

    report = commands.add_parser("sweep-report", help="tokens/s and scaling efficiency of a `launch --sweep` folder")
    report.add_argument("sweep_dir", help="the sweep folder `launch --sweep` wrote")

    frontier = commands.add_parser("frontier", help="run a grid of a recipe's variants (sharing stages) and "
                                   "chart target gain against forgetting")
    _recipe_args(frontier)
    frontier.add_argument("--grid", action="append", required=True, metavar="KEY.PATH=V1,V2",
                          help="a recipe key and its values (repeatable: the points are every combination), "
                               "e.g. --grid stage2.optimizer.lr=1e-3,4e-3")
    frontier.add_argument("--out", default=None, help="folder for the points' runs and frontier.json/md/png "
                                                      "(default: RUN_ROOT/NAME-frontier)")

    commands.add_parser("reference", help="print the recipe reference (Markdown) generated from the schema")
    return parser


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


def cmd_eval(args: argparse.Namespace) -> int:
    """Every argument is checked before torch loads (seconds of imports): the model or run, the
    references, the suites (and what their tasks read), the texts and their languages, `--name`,
    whether the suites measure anything on the held-out text found, the output folder, the run
    lock, and every model folder to be scored, as the run checks its base (`model_folder_problem`)."""
    from langadapt.evaluation.held_out import check_model_or_run, eval_target, read_given_texts
    from langadapt.evaluation.naming import RESULTS, split_named
    from langadapt.evaluation.suite import check_suite_inputs, load_suites
    from langadapt.recipe.evaluation import DEFAULT_SUITES

    suites = args.suite or list(DEFAULT_SUITES)
    check_model_or_run(args.model)
    for entry in args.compare:
        name, path = split_named(entry)
        check_model_or_run(path, f"--compare {name}=" if name else "--compare ")
    loaded = load_suites(suites)
    for suite in loaded:
        check_suite_inputs(suite)
    check_text_languages(args.texts)
    texts = read_given_texts(args.texts, args.text_field)
    out = Path(args.out) if args.out else default_eval_out(Path(args.model), args.name)
    with _run_lock_for(out):  # a `langadapt run` of the same run directory must not write at the same time
        if (out / RESULTS).exists() and not args.overwrite:
            raise LangadaptError(f"{out / RESULTS}: already exists; pass --overwrite to replace it (or choose another --out)")
        target = eval_target(args.model, args.compare, args.name, loaded, texts)  # reads the run's held-out split
        for what, folder in eval_model_folders(args.model, args.compare):
            refuse_model_folder(folder, what)
        from langadapt.evaluation import evaluate_cli

        scoring = {} if args.max_bytes is None else {"max_bytes_per_lang": args.max_bytes or None}
        results = evaluate_cli(args.model, suites, out, args.compare, name=args.name, texts=texts, target=target,
                               scoring=scoring)
    print(f"models: {', '.join(results['models'])} (deltas against {results['reference']})")
    for lang, info in results.get("langs", {}).items():
        if "bytes_given" in info:  # the byte cap cut it: say so where the user looks, not only in the report
            print(f"held-out text {lang}: scored {info['documents']:,} of {info['documents_given']:,} documents, "
                  f"{info['bytes']:,} of {info['bytes_given']:,} bytes (--max-bytes all scores every byte)")
    if results.get("held_out_run"):
        print(f"held-out text: the valid split of {results['held_out_run']}")
    print(f"evaluation written to {out}")
    return 0


def _max_bytes(value: str) -> int:
    """`--max-bytes`: a positive number of bytes, or `all` (0 here: no cap). A flag because the
    recipe's `evaluation.max_bytes_per_lang` (1,000,000 by default, often set lower to score fast)
    silently cut `--texts` files a user gave whole: 3 of 8 documents scored (issue 38)."""
    if value.strip().lower() == "all":
        return 0
    try:
        number = int(value.replace("_", "").replace(",", ""))
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: expected a positive number of bytes or `all`")
    return number


def check_text_languages(entries: list[str]) -> None:
    """`--texts LANG=FILE`: LANG is a language code as a recipe's `lang` must be (`recipe.languages`),
    so `Norwegian` or `xx` is refused as `lang: Norwegian` is, not scored and reported under that name."""
    from langadapt.recipe.languages import language_problem

    for entry in entries:
        lang, sep, name = entry.partition("=")
        if sep and lang and name and (problem := language_problem(lang)):
            raise LangadaptError(f"--texts {entry}: {problem}")


def eval_model_folders(model: str, compare: list[str]) -> list[tuple[str, Path]]:
    """(how the command line named it, folder) of every model folder `langadapt eval` loads: the
    folder given, or each model a run directory holds; each `--compare` folder, or the model of a
    run it names (its final, as `evaluation.stage.compare_models` takes it)."""
    from langadapt.evaluation.held_out import is_model_folder
    from langadapt.evaluation.naming import split_named
    from langadapt.run.layout import RunLayout

    target = Path(model)
    found = [("", target)] if is_model_folder(target) else [("", p) for p in RunLayout(target).models_on_disk().values()]
    for entry in compare:
        path = Path(split_named(entry)[1])
        models = [path] if is_model_folder(path) else list(RunLayout(path).models_on_disk().values())[-1:]
        found += [(f"--compare {entry}: ", p) for p in models]
    return found


def refuse_model_folder(folder: Path, what: str = "", weights: bool = True, tokenizer: bool = True) -> None:
    """One line naming the folder when it cannot load as a model (`inputs.model_folder.model_folder_problem`,
    the check the run makes of its base): headers and file names only, before torch is imported."""
    from langadapt.inputs.model_folder import model_folder_problem

    if problem := model_folder_problem(folder, weights=weights, tokenizer=tokenizer):
        raise LangadaptError(f"{what}{problem}")


def _run_lock_for(out: Path) -> contextlib.AbstractContextManager[object]:
    """The run lock of the run directory `out` is inside (`RUN/eval`, or an --out in a run); none elsewhere."""
    from langadapt.run.layout import RunLayout, owning_run_dir
    from langadapt.run.lock import RunLock

    run_dir = owning_run_dir(out.absolute())
    return RunLock(RunLayout(run_dir).lock) if run_dir is not None else contextlib.nullcontext()


def default_eval_out(target: Path, name: str | None = None) -> Path:
    """`<run>/eval` for a run directory; `eval_<name>` here for a model folder, which is left
    untouched (it may be read-only, or be uploaded to the Hub as it is). The name is `--name`, else
    the run and stage the folder came from (`eval_demo_stage2`, not one `eval_model` for all)."""
    from langadapt.evaluation.naming import derived_name, out_folder_name
    from langadapt.recipe.paths import check_name
    from langadapt.run.layout import RunLayout

    if (target / "config.json").is_file():
        return Path(check_name(out_folder_name(name or derived_name(target)), "--name"))
    return RunLayout(target).cli_eval


def cmd_export(args: argparse.Namespace) -> int:
    """Export when the run's export is missing or stale (an existing one is replaced only with
    --overwrite), or export one checkpoint; then push the exported folder if asked.

    Everything the user can get wrong (repo id, branch, token, nothing trained yet) is checked
    before any export or upload work. The push is not part of the export's inputs: pushing a
    finished export re-uses it as it is (hand-edited card included) after checking that what the
    export verified is unchanged."""
    from langadapt.export.hub import check_push, push
    from langadapt.export.provenance import RunFacts
    from langadapt.export.trained import parse_checkpoint, require_trained
    from langadapt.pipeline.runner import WORKING, run_pipeline
    from langadapt.recipe import load_recipe
    from langadapt.run.base_model import resolve_base_model
    from langadapt.run.layout import RunLayout

    loaded = load_recipe(args.recipe, args.overrides)
    recipe = loaded.recipe
    if args.revision and not args.push_to_hub:
        raise LangadaptError("--revision: only used with --push-to-hub REPO_ID")
    if args.push_to_hub:
        check_push(args.push_to_hub, args.revision)
    if args.checkpoint:
        parse_checkpoint(args.checkpoint)
    layout = RunLayout(recipe.run_dir)
    require_trained(layout)
    revision = args.revision
    if args.checkpoint:
        base = resolve_base_model(recipe, fetch=False)  # its vocabulary files go into the folder
        if base is not None:  # checked as the pipeline checks it (`resolve_base_model` with fetch=True)
            refuse_model_folder(Path(base), "base_model.path: ", weights=False, tokenizer=False)
        from langadapt.export.stage import export_checkpoint  # torch: after every refusal above

        paths = export_checkpoint(args.checkpoint, layout, recipe.export, RunFacts.from_recipe(recipe),
                                  base, args.overwrite)
        revision = revision or paths.root.name  # never over the final model on main
        print(f"exported {args.checkpoint} to {paths.model}")
    else:
        paths = layout.export
        planned = dict(run_pipeline(loaded, only="export", force=args.overwrite, dry_run=True))
        if planned["export"] in WORKING and paths.model.exists() and not args.overwrite:
            raise LangadaptError(f"{paths.model}: an export exists (its inputs changed since); pass --overwrite to replace it")
        # the pipeline checks the base (`resolve_base_model`) before the export stage imports torch
        actions = dict(run_pipeline(loaded, only="export", force=args.overwrite, overwrite=args.overwrite))
        print(f"exported to {paths.model}" if actions["export"] in WORKING else f"export is up to date: {paths.model}")
        if (actions["export"] in WORKING and recipe.export.push_to_hub and recipe.export.repo_id == args.push_to_hub
                and revision is None):  # the export stage has just pushed this folder there
            print(f"pushed to {args.push_to_hub} by the export stage (export.push_to_hub)")
            return 0
    if args.push_to_hub:
        from langadapt.export.stage import verified_for_push  # torch

        verified_for_push(paths, layout, recipe.export)
        url = push(paths.model, args.push_to_hub, recipe.export.private, revision)
        print(f"pushed to {args.push_to_hub}{f' (branch {revision})' if revision else ''}: {url}")
    return 0


def cmd_launch(args: argparse.Namespace) -> int:
    from langadapt.recipe import load_recipe
    from langadapt.runtime.launch import datatrove_on_slurm, launch_from_options
    from langadapt.runtime.launch_options import LaunchOptions

    recipe = load_recipe(args.recipe, args.overrides).recipe  # fail here, not after the queue wait
    cluster = recipe.cluster
    # Nodes and GPUs per node from the recipe's cluster (`--set cluster.nodes=N`): what `plan` and preflight assumed.
    options = LaunchOptions.from_args(args, cluster)
    if options.sweep:
        if options.dry_run:
            raise LangadaptError("launch --dry-run: not with --sweep (it writes a folder of scripts; inspect that)")
        from langadapt.experiments.sweep import write_sweep_from_options

        folder = write_sweep_from_options(options, recipe.name, recipe.run_dir)
        print(f"wrote the sweep {folder}; submit with: bash {folder}/submit.sh; "
              f"afterwards: langadapt sweep-report {folder}")
        return 0
    datatrove = datatrove_on_slurm(recipe.data)
    files = launch_from_options(options, cluster.preparation, datatrove=datatrove)
    if options.dry_run:
        for path, text in files.items():
            print(f"# ==> {path} <==\n{text}")
    *prepare, train, submit = files  # render_launch's order; no prepare.sbatch on datatrove
    prep, verb = cluster.preparation, "would write" if options.dry_run else "wrote"
    if datatrove is None:
        print(f"{verb} {prepare[0]} (preparation: 1 CPU node, {prep.cpus} cores, {prep.time}), {train} (training: "
              f"{options.nodes} GPU node(s)) and {submit}; submit both with: bash {submit} (training waits for the "
              "preparation: sbatch --dependency=afterok)")
    else:
        print(f"{verb} {train} (training: {options.nodes} GPU node(s)) and {submit}; submit both with: bash {submit} "
              f"(it submits the preparation on datatrove over Slurm: {datatrove.tasks or 'one per piece'} cleaning "
              f"task(s), then merge, tokenizer and embeddings on {datatrove.finish_cpus} cores; training waits for "
              "the preparation: sbatch --dependency=afterok)")
    return 0


def cmd_sweep_report(args: argparse.Namespace) -> int:
    from langadapt.experiments.sweep import write_report

    table, path = write_report(args.sweep_dir)
    print(f"{table}\n(written to {path})")
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


COMMANDS = {"run": cmd_run, "plan": cmd_plan, "eval": cmd_eval, "export": cmd_export,
            "launch": cmd_launch, "sweep-report": cmd_sweep_report, "frontier": cmd_frontier,
            "reference": cmd_reference}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in ("run", "frontier"):
        latch_stop_signals()  # before anything slow: Slurm's warning may come while torch imports
    from langadapt.runtime.logs import setup_logging

    setup_logging(debug=args.debug)
    try:
        return COMMANDS[args.command](args)
    except LangadaptError as exc:
        if args.debug:
            raise
        print(f"langadapt: error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("langadapt: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `langadapt plan ... | head`: the reader left, which is not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 0
    except Preempted as stop:  # a scheduler's signal, honoured: the sbatch script requeues on 75
        print(f"langadapt: {stop}", file=sys.stderr)
        return REQUEUE_EXIT_CODE
    except Exception as exc:  # a full disk, a folder not ours, a file in the way: the user's to fix, not a bug
        line = os_error_line(exc)
        if line is None or args.debug:
            raise
        print(f"langadapt: error: {line}", file=sys.stderr)
        return EXIT_USER_ERROR


if __name__ == "__main__":
    sys.exit(main())
