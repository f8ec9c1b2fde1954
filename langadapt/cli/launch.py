"""`langadapt launch` and `langadapt sweep-report`: a multi-node run's Slurm scripts, or a scaling
sweep's, and the sweep's report once its jobs ran; and `launch --submit-preparation`, the line the
scripts' submit.sh runs for a preparation on datatrove over Slurm (`datatrove_slurm`)."""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys

from langadapt.errors import LangadaptError

PREPARATION_UNTIL = ("data", "tokenizer", "embeddings")
"""The stages a preparation on datatrove may end with (the CPU stages; training is the GPU job's)."""


def cmd_launch(args: argparse.Namespace) -> int:
    if args.submit_preparation:
        return submit_preparation_now(args)
    if args.until is not None or args.dependency is not None:
        raise LangadaptError("launch --until/--dependency: only with --submit-preparation (what submit.sh runs)")
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


def submit_preparation_now(args: argparse.Namespace) -> int:
    """`langadapt launch RECIPE --slurm --submit-preparation [--set ...] [--until STAGE] [--dependency
    JOB_ID]`, the line the submit.sh of a launch on datatrove runs (`runtime.launch.datatrove_submit_command`):
    submit the cleaning array and the job that merges and runs the stages up to `--until`
    (`cli.datatrove_slurm.submit_preparation`) and print that last job's id alone on stdout, so
    `prepare=$(...)` is the id (datatrove's log goes to stderr). A recipe or submission error is one
    line on stderr and exit code 2, as for every command."""
    if args.dry_run or args.sweep:
        raise LangadaptError("launch --submit-preparation: not with --dry-run or --sweep (it submits jobs)")
    from langadapt.cli.datatrove_slurm import submit_preparation

    try:
        with contextlib.redirect_stdout(sys.stderr):  # nothing but the id on stdout
            job = submit_preparation(args.recipe, args.overrides, until=args.until or "embeddings",
                                     dependency=args.dependency)
    except (subprocess.CalledProcessError, OSError) as err:  # sbatch refused, or is not here
        raise LangadaptError(str(err)) from None
    print(job)
    return 0


def cmd_sweep_report(args: argparse.Namespace) -> int:
    from langadapt.experiments.sweep import write_report

    table, path = write_report(args.sweep_dir)
    print(f"{table}\n(written to {path})")
    return 0
