"""Where `langadapt eval` finds held-out text and scoring settings for a model folder.

A run's evaluate stage scores its models on the run's held-out split with the recipe's
`evaluation` settings. `langadapt eval` reproduces those numbers for any folder: text the user
names (`--texts LANG=FILE`, read by the data stage's own reader), else the run directory the
folder lies in, else the run that the recipe exported beside the weights names (if it is here);
and the window, stride and byte cap of that recipe, not the defaults (a 256-token window gives
other bits per byte than 512).

Light on purpose (no torch): the CLI reads and checks `--texts`, finds the held-out text and
refuses what cannot be scored (`eval_target`) before the heavy imports, so each refusal comes in
a fraction of a second.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from langadapt.data.documents import texts_by_lang
from langadapt.data.sources import format_of, iter_texts
from langadapt.errors import LangadaptError
from langadapt.evaluation.naming import split_named
from langadapt.evaluation.suite import Suite, unmeasured
from langadapt.inputs.compression import input_problem
from langadapt.inputs.model_folder import is_model_folder
from langadapt.recipe.data import SourceConfig
from langadapt.recipe.evaluation import EvaluationConfig
from langadapt.recipe.export import RECIPE_FILE
from langadapt.recipe.paths import run_directory
from langadapt.run.layout import RunLayout, owning_run_dir, recipe_tree

log = logging.getLogger("langadapt")

SCORING_KEYS = ("window", "stride", "batch_size", "max_bytes_per_lang", "dtype", "random_baseline", "generate")
"""The recipe's evaluation settings that decide the numbers; suites and compare come from the
command line, and device and cold_baseline belong to the machine and the pipeline."""
_LANG = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


@dataclass(frozen=True)
class GivenTexts:
    """Held-out documents the user gave (`--texts`), by language, with the files they came from."""

    texts: dict[str, list[str]]
    sources: dict[str, str]
    """Language -> the file names, for the report's data table."""


def read_given_texts(entries: list[str], text_field: str = "text") -> GivenTexts:
    """`--texts LANG=FILE` entries (repeatable; a language may get several files), read with the
    data stage's reader (`data.sources.iter_texts`): .txt (a blank-line separated paragraph a
    document), .jsonl with a `text_field` field (`--text-field`, as a source's `text_field`), .json
    or .parquet, plain or .gz/.zst, with its checks (invalid UTF-8 located, binary and truncated
    files refused)."""
    files: dict[str, list[Path]] = {}
    for entry in entries:
        lang, sep, name = entry.partition("=")
        if not sep or not name or not _LANG.fullmatch(lang):
            raise LangadaptError(f"--texts {entry}: expected LANG=FILE, a language code and a file, "
                                 "e.g. --texts nb=heldout.jsonl.gz")
        path = Path(name)
        if problem := input_problem(path):
            raise LangadaptError(f"--texts {entry}: {problem}")
        files.setdefault(lang, []).append(path)
    texts = {}
    for lang, paths in files.items():
        source = SourceConfig(name=lang, path=[str(p) for p in paths], lang=lang, text_field=text_field)
        try:
            for path in paths:
                format_of(source, path)
        except LangadaptError:
            raise LangadaptError(f"--texts {lang}={path}: cannot tell the format from the name; "
                                 "use .txt, .jsonl, .json or .parquet (optionally .gz or .zst)") from None
        try:
            texts[lang] = list(iter_texts(source, paths, "error", Counter()))
        except LangadaptError as exc:  # the data stage's words ("source nb: ...") for the flag's
            raise LangadaptError(f"--texts {lang}: {str(exc).removeprefix(f'source {lang}: ')}") from None
        if not any(text.strip() for text in texts[lang]):
            raise LangadaptError(f"--texts {lang}={', '.join(map(str, paths))}: no text in it")
    return GivenTexts(texts, {lang: ", ".join(p.name for p in paths) for lang, paths in files.items()})


def check_model_or_run(path: str, what: str = "") -> None:
    """Refuse what `langadapt eval` cannot score, from the file system alone (before torch loads):
    a missing path, a folder that is neither a model folder (config.json) nor a run directory, and
    a run directory with nothing trained yet (scoring only its base would take minutes to say so)."""
    where = f"{what}{path}"
    folder = Path(path)
    if not folder.exists():
        raise LangadaptError(f"{where}: no such run directory or model folder")
    if is_model_folder(folder) or RunLayout(folder).models_on_disk():
        return
    if RunLayout(folder).resolved_recipe.is_file():
        raise LangadaptError(f"{where}: a run directory with no trained model yet (no stage has saved one); "
                             "run its recipe first")
    raise LangadaptError(f"{where}: neither a Hugging Face model folder (no config.json) nor a run directory with models")


def exported_recipe(folder: Path) -> dict[str, Any]:
    """The recipe the export stage wrote beside a model folder's weights; {} for other folders."""
    return recipe_tree(folder / RECIPE_FILE)


def run_of(folder: Path) -> Path | None:
    """The run directory that made model folder `folder`, if it is here: the one the folder lies in
    (RUN/export/model, RUN/stage2/model, RUN/exported_checkpoints/NAME/model), else the one its
    exported recipe names (run_root/name, relative to the working directory as for `langadapt run`),
    when that folder is a run of the same name. A recipe whose run_root was an absolute path names
    `<local>/...` (machine paths are stripped from published recipes): that run is not found."""
    inside = owning_run_dir(folder.absolute())
    if inside is not None:
        return inside
    tree = exported_recipe(folder)
    try:
        candidate = run_directory(str(tree["run_root"]), str(tree["name"]))
    except (KeyError, LangadaptError):
        return None
    named = RunLayout(candidate).recipe().get("name")
    return candidate if named == tree["name"] else None


def recipe_scoring(tree: dict[str, Any]) -> EvaluationConfig:
    """The recipe's evaluation settings that decide the numbers (`SCORING_KEYS`), over the defaults.

    A recipe from another langadapt version whose settings no longer validate falls back to the
    defaults, with a warning: the numbers may then differ from its run's report."""
    section = tree.get("evaluation") if isinstance(tree.get("evaluation"), dict) else {}
    try:
        return EvaluationConfig.model_validate({key: section[key] for key in SCORING_KEYS if key in section})
    except ValidationError as exc:
        log.warning("eval: the recipe's evaluation settings do not validate here (%s); scoring with the "
                    "defaults, so the numbers may differ from its run's report", exc.errors()[0]["msg"])
        return EvaluationConfig()


def recipe_target_langs(tree: dict[str, Any]) -> list[str]:
    """The languages of the recipe's `role: target` sources (the report's gain side)."""
    data = tree.get("data")
    sources = data.get("sources") if isinstance(data, dict) else None
    if not isinstance(sources, list):
        return []
    return sorted({s["lang"] for s in sources if isinstance(s, dict) and s.get("role", "target") == "target"
                   and isinstance(s.get("lang"), str)})


def held_out_texts(run_dir: Path | None) -> dict[str, list[str]]:
    """The run's held-out documents by language, or {} when there is no data stage output."""
    if run_dir is None or not RunLayout(run_dir).data.valid.is_dir():
        return {}
    return texts_by_lang(RunLayout(run_dir).data.root, "valid")


@dataclass(frozen=True)
class EvalTarget:
    """What `langadapt eval` scores and on which text, found from the file system alone."""

    path: Path
    origin: Path | None
    """The run the model came from (the run directory itself for one); None when not here."""
    tree: dict[str, Any]
    """That run's recipe, else the recipe exported beside the model; {} without either."""
    data_dir: Path | None
    """The run whose held-out split is scored: the origin's, else the first `--compare` run's."""
    texts: dict[str, list[str]]
    """Held-out documents by language: the run's, with `--texts` over them."""


def eval_target(model_or_run: str, compare: list[str], name: str | None, suites: list[Suite],
                given: GivenTexts) -> EvalTarget:
    """Find what `langadapt eval` scores and refuse what cannot be scored, before torch loads (a
    refusal after the imports costs seconds): `--name` given for a run directory (its models have
    fixed names), and a suite that would measure nothing on the held-out text found
    (`suite.unmeasured`: the report would be empty)."""
    check_model_or_run(model_or_run)
    target = Path(model_or_run)
    if name is not None and not is_model_folder(target):
        raise LangadaptError(f"--name {name}: names a model folder; a run's models are named base, init, stage1, adapted")
    origin = run_of(target) if is_model_folder(target) else target
    tree = RunLayout(origin).recipe() if origin is not None else exported_recipe(target)
    candidates = [origin, *(Path(split_named(c)[1]) for c in compare)]
    data_dir = next((d for d in candidates if d is not None and RunLayout(d).data.valid.is_dir()), None)
    texts = {**held_out_texts(data_dir), **given.texts}
    with_text = [lang for lang, docs in texts.items() if docs]
    for suite in suites:
        if problem := unmeasured(suite, with_text):
            raise LangadaptError(f"eval: {problem}")
    return EvalTarget(target, origin, tree, data_dir, texts)
