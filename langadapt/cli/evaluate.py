"""`langadapt eval`: score a run directory or a model folder, every argument checked before torch loads.

The model-folder check (`refuse_model_folder`) is also `langadapt export --checkpoint`'s check of
the base model.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from langadapt.errors import LangadaptError


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


def max_bytes(value: str) -> int:
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
    run it names (its final or latest: `evaluation.stage_inputs.compare_folder`, as the evaluate stage takes it)."""
    from langadapt.evaluation.naming import split_named
    from langadapt.evaluation.stage_inputs import compare_folder
    from langadapt.inputs.model_folder import is_model_folder
    from langadapt.run.layout import RunLayout

    target = Path(model)
    found = [("", target)] if is_model_folder(target) else [("", p) for p in RunLayout(target).models_on_disk().values()]
    for entry in compare:
        path = Path(split_named(entry)[1])
        folder = compare_folder(path)
        found += [(f"--compare {entry}: ", folder)] if folder is not None else []
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
    from langadapt.inputs.model_folder import is_model_folder
    from langadapt.recipe.paths import check_name
    from langadapt.run.layout import RunLayout

    if is_model_folder(target):
        return Path(check_name(out_folder_name(name or derived_name(target)), "--name"))
    return RunLayout(target).cli_eval

