"""`langadapt export`: (re-)export a run's model folder, or one checkpoint, and push it if asked."""

from __future__ import annotations

import argparse
from pathlib import Path

from langadapt.cli.evaluate import refuse_model_folder
from langadapt.errors import LangadaptError


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

