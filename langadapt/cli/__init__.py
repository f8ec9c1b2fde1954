"""The `langadapt` command: thin argument parsing over pipeline, plan, eval, export and launch.

New knobs belong in the recipe (and `--set key.path=value`), not here. User errors are printed as
one line and exit with status 2; `--debug` shows tracebacks.

The parser is here, every command's flags in one table; each command's handler sits in the module
of its group (`run`: run, plan, frontier, reference; `evaluate`; `export`; `launch`: launch,
sweep-report), which imports what it drives only when it runs, so `--help` and a refused argument
load no torch.
"""

from __future__ import annotations

import argparse
import os
import sys

from langadapt.cli.evaluate import cmd_eval, max_bytes
from langadapt.cli.export import cmd_export
from langadapt.cli.launch import PREPARATION_UNTIL, cmd_launch, cmd_sweep_report
from langadapt.cli.run import cmd_frontier, cmd_plan, cmd_reference, cmd_run
from langadapt.errors import EXIT_USER_ERROR, LangadaptError
from langadapt.ioerrors import os_error_line
from langadapt.runtime.signals import REQUEUE_EXIT_CODE, Preempted, latch_stop_signals


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
    ev.add_argument("--max-bytes", default=None, metavar="N|all", type=max_bytes,
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
    # What the submit.sh of a launch on datatrove runs (`submit_preparation_now`), not typed by hand.
    launch.add_argument("--submit-preparation", action="store_true", help=argparse.SUPPRESS)
    launch.add_argument("--until", choices=PREPARATION_UNTIL, help=argparse.SUPPRESS)
    launch.add_argument("--dependency", metavar="JOB_ID", help=argparse.SUPPRESS)

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

