"""Validation before work: everything wrong with a recipe that is knowable without training.

`langadapt run` and `--dry-run` call `check_recipe` before any stage runs, so a missing corpus,
a base model folder without `config.json`, a `seq_len` beyond the model's positions or a missing
evaluation suite fails in a second instead of after hours of data preparation and training.
Each problem is one line naming the recipe file, line and key; a run raises the first as a
`LangadaptError` (the others are counted), `--dry-run` prints them all (`find_problems`).
A model config is read as JSON and a tokenizer as its tokenizer.json; transformers is imported
only to complete or build a `base_model.architecture` (`planning.models`), and that last check
waits for every other to pass.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Collection
from pathlib import Path
from typing import Any

from huggingface_hub.constants import PYTORCH_WEIGHTS_NAME, SAFETENSORS_INDEX_FILE, SAFETENSORS_SINGLE_FILE

from langadapt.data.encoders import eos_problem
from langadapt.errors import LangadaptError
from langadapt.inputs.compression import input_problem
from langadapt.inputs.files import file_kind, irregular_files
from langadapt.inputs.model_folder import parts_problem, weights_problem
from langadapt.inputs.text import read_input_json
from langadapt.inputs.tokenizer_json import tokenizer_json_problem
from langadapt.pipeline.preflight_data import check_sources, check_vocab_size, report_estimated_epochs
from langadapt.planning.models import architecture_config, complete_architecture, ties_embeddings
from langadapt.planning.training import resolve_training
from langadapt.recipe import LoadedRecipe, Recipe, load_recipe
from langadapt.recipe.embeddings import head_init_problem
from langadapt.recipe.errors import Report
from langadapt.recipe.hints import hub_dataset_fetch
from langadapt.run.base_model import build_target_problem, hub_cached, hub_offline, hub_reachable, hub_repo_id, not_cached_line
from langadapt.run.layout import STAGES
from langadapt.runtime.placement import DistInfo, training_world_size

log = logging.getLogger("langadapt")

POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")
"""Where Hugging Face configs keep the context length (Llama/Mistral, GPT-2, others)."""
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tekken.json", "vocab.json")
WEIGHT_FILES = (SAFETENSORS_SINGLE_FILE, SAFETENSORS_INDEX_FILE, PYTORCH_WEIGHTS_NAME, f"{PYTORCH_WEIGHTS_NAME}.index.json")


def check_recipe(loaded: LoadedRecipe, stages: Collection[str] | None = None, world_size: int | None = None) -> None:
    """Raise LangadaptError for the first problem in what `stages` (default: all) would need
    (its line says how many more there are; `find_problems` lists them all)."""
    find_problems(loaded, stages, world_size, data_first=True).raise_first()


def find_problems(loaded: LoadedRecipe, stages: Collection[str] | None = None, world_size: int | None = None,
                  data_first: bool = False, report: Report | None = None) -> Report:
    """Every problem knowable without training in what `stages` (default: all) would need.

    `world_size` is the number of training processes (default: `placement.training_world_size`:
    the launcher's world, an sbatch job's task count, else the recipe's cluster, where `langadapt launch` will run it); it sets the global
    batch and hence the epochs per source exactly as training computes them. Each check runs
    under `Report.guard`, so one that stops on its own error does not hide the others; `report`
    may hold problems found before (the dry run's run-folder claim).

    `data_first` (a real run, which stops at the first problem anyway) returns when the data
    sources have a problem, before the base model's checks, which may import transformers (2-3 s
    of CPU): a missing or unreadable corpus file is refused in a third of a second. The one check
    that always imports it, that transformers builds `base_model.architecture`, runs last and only
    when nothing else was found (a dry run names it once the problems it listed are fixed).
    """
    recipe, report = loaded.recipe, report or Report(loaded.path, loaded.inheritance, loaded.overrides)
    will = set(STAGES if stages is None else stages)
    training = [name for name in recipe.training_stages if name in will]
    model_config = base_tokenizer = None
    if "data" in will:
        with report.guard():
            check_sources(recipe, report)
        with report.guard():
            _check_hub_sources(recipe, report)
        if data_first and report.problems:
            return report
    with report.guard():
        model_config, base_tokenizer = _check_base_model(recipe, report, needs_model=bool(will - {"data", "export"}))
    for name in training:
        with report.guard():
            _check_positions(recipe, name, model_config, report)
    if "tokenizer" in will:
        with report.guard():
            check_vocab_size(recipe, base_tokenizer, report)
        with report.guard():
            _check_eos(recipe, report)
    if "embeddings" in will:
        with report.guard():
            _check_embedding_files(recipe, report)
        _check_head_init(recipe, model_config, report)
    if training:
        world = world_size or training_world_size(recipe.cluster.world_size)
        # Rank 0 warns (once, not once per rank) when the global batch follows a world the cluster did not plan.
        planned_world = recipe.cluster.world_size if DistInfo.from_env().rank == 0 else None
        with report.guard():
            report_estimated_epochs(recipe, training, world, report)
        for name in training:  # the engine refusals that do not depend on this machine's device
            with report.guard():
                resolve_training(name, getattr(recipe, name), recipe.engine, world, "cuda", have_liger=True,
                                 planned_world_size=planned_world)
            _warn_all_warmup(name, getattr(recipe, name))
    if "evaluate" in will:
        with report.guard():
            _check_suites(recipe, report)
    with report.guard():
        check_licence(recipe, will)
    if recipe.base_model.architecture and "embeddings" in will and not report.problems:
        with report.guard():  # last, and only on an otherwise valid recipe: it imports transformers (seconds)
            architecture_config(recipe.base_model.architecture)
    return report


def _warn_all_warmup(name: str, stage: Any) -> None:
    """A stage whose warm-up, as the user set it, lasts all its steps never trains at its peak LR nor
    decays: legal, but said, since it is rarely what a recipe means. The schema refuses a longer one;
    the default 10 is left alone like there (a 3-step test stage did not ask for it)."""
    warmup = stage.schedule.warmup_steps
    if stage.enabled and "warmup_steps" in stage.schedule.model_fields_set and warmup >= stage.steps > 0:
        log.warning("%s: schedule.warmup_steps %d covers all %d steps: the LR rises for the whole stage and "
                    "reaches optimizer.lr only at its last step", name, warmup, stage.steps)


def _transformers_converts_tekken() -> bool:
    """Whether the installed transformers has its tekken.json converter (5.x), without importing it."""
    spec = importlib.util.find_spec("transformers")
    return spec is not None and spec.origin is not None and (
        Path(spec.origin).parent / "integrations" / "mistral").is_dir()


def _check_base_model(recipe: Recipe, report: Report, needs_model: bool) -> tuple[dict | None, dict | None]:
    """(config.json as a dict, tokenizer.json as a dict) of the base model, where they can be read."""
    spec = recipe.base_model
    if spec.path is None or not needs_model:
        return complete_architecture(spec.architecture or {}) or None, None
    folder = Path(spec.path)
    if folder.exists() and not folder.is_dir():  # e.g. the weights or config.json inside it
        report.add(("base_model", "path"), f"{folder} is a file, not a model folder: name the folder that holds "
                   "config.json, the weights and the tokenizer")
        return None, None
    if not folder.is_dir():
        return _model_to_come(recipe, report), None
    weights_sound = False  # present and intact: then checked against config and tokenizer (`parts_problem`)
    for problem in irregular_files(folder):
        report.add(("base_model", "path"), problem)
    config = _read_json(folder / "config.json", ("base_model", "path"), report,
                        missing="has no config.json: not a Hugging Face model folder")
    if recipe.init == "warm" and not any((folder / name).exists() for name in WEIGHT_FILES):
        report.add(("base_model", "path"), f"{folder} has no weights ({' or '.join(WEIGHT_FILES[::2])})")
    elif recipe.init == "warm" and (problem := weights_problem(folder)):
        report.add(("base_model", "path"), problem)
    else:
        weights_sound = recipe.init == "warm"
    needs_tokenizer = recipe.init == "warm" or recipe.tokenizer.kind in ("inherit", "keep_base")
    if not needs_tokenizer:
        return config, None
    present = [name for name in TOKENIZER_FILES if (folder / name).exists()]
    if not present:
        report.add(("base_model", "path"), f"{folder} has no tokenizer files "
                   "(tokenizer.json, tokenizer.model, tekken.json, or vocab.json + merges.txt)")
    elif present == ["tokenizer.model"] and importlib.util.find_spec("sentencepiece") is None:
        report.add(("base_model", "path"), f"{folder} has only a SentencePiece tokenizer.model: "
                   "pip install sentencepiece (or save the tokenizer as tokenizer.json)")
    elif present == ["tekken.json"] and not _transformers_converts_tekken():
        report.add(("base_model", "path"), f"{folder} has only a Mistral tekken.json, which this transformers "
                   "cannot convert: pip install 'transformers>=5' (or save the tokenizer as tokenizer.json)")
    tokenizer = None
    if "tokenizer.json" in present:
        tokenizer = _read_json(folder / "tokenizer.json", ("base_model", "path"), report, missing="")
    if tokenizer is not None and (problem := tokenizer_json_problem(folder / "tokenizer.json", tokenizer)):
        report.add(("base_model", "path"), problem)  # the tokenizer stage's loader would refuse it
        tokenizer = None  # not read further (ids, vocab_size, extension) by checks that trust its shape
    if weights_sound and (problem := parts_problem(folder, config or {}, tokenizer or {})):
        report.add(("base_model", "path"), problem)  # config, weights and tokenizer disagree
    return config, tokenizer


def _check_eos(recipe: Recipe, report: Report) -> None:
    """The token files need an EOS between documents: a tokenizer without one failed in the
    tokenizer stage, after the data stage. Where the EOS comes from the base tokenizer (keep_base,
    or inherit without tokenizer.eos_token), the base folder must have one; a scratch tokenizer
    whose special_tokens leave out the default `</s>` must name its eos_token."""
    config = recipe.tokenizer
    if config.eos_token is not None:
        return
    folder = Path(recipe.base_model.path) if recipe.base_model.path else None
    if folder is not None and folder.is_dir() and config.kind in ("inherit", "keep_base"):
        if problem := eos_problem(folder):
            report.add(("base_model", "path"), problem.removeprefix("tokenizer "))
    elif recipe.base_model.path is None and config.special_tokens is not None and "</s>" not in config.special_tokens:
        report.add(("tokenizer", "special_tokens"), "no EOS token (no </s>, and tokenizer.eos_token is not set): "
                   "the token files put one between documents; set tokenizer.eos_token to one of them")


def _model_to_come(recipe: Recipe, report: Report) -> dict | None:
    """A base folder that does not exist yet: built by `build_recipe` (its architecture is the
    config to check against), or a Hub id (unknown offline); anything else is an error now."""
    spec = recipe.base_model
    assert spec.path is not None
    if spec.build_recipe:
        try:
            build = load_recipe(spec.build_recipe).recipe
        except LangadaptError as exc:
            report.add(("base_model", "build_recipe"), str(exc))
            return None
        if problem := build_target_problem(recipe, build):
            report.add(("base_model", "path"), problem)
            return None
        return complete_architecture(build.base_model.architecture or {}) or None
    if hub_repo_id(spec.path) is not None:  # a Hub id: downloaded when the run starts, if the Hub answers
        if hub_cached(spec.path, spec.revision) is None and (why := _hub_out_of_reach(spec.path, "model")):
            report.add(("base_model", "path"), not_cached_line(spec.path, why, spec.revision))
        return None
    report.add(("base_model", "path"), f"folder {spec.path} not found (and no base_model.build_recipe; "
               "not a Hub id of the form org/name)")
    return None


def _hub_out_of_reach(repo_id: str, repo_type: str) -> str | None:
    """Why the Hub cannot serve `repo_id` from here (None: it can): switched off, or no answer. A
    machine without network and without HF_HUB_OFFLINE used to pass the dry run, and the run then
    stopped at once."""
    if hub_offline():
        return "HF_HUB_OFFLINE=1 keeps the Hub out of reach"
    if repo_type not in _HUB_ANSWERED:  # one probe per kind: a machine without network times out once
        _HUB_ANSWERED[repo_type] = hub_reachable(repo_id, repo_type, timeout=3.0)
    return None if _HUB_ANSWERED[repo_type] else "the Hub cannot be reached (no network?)"


_HUB_ANSWERED: dict[str, bool] = {}
"""Whether the Hub answered, by repository type, in this process."""


def _check_hub_sources(recipe: Recipe, report: Report) -> None:
    """Hub dataset sources that are neither cached nor downloadable from here."""
    from langadapt.run.base_model import hub_dataset_cached

    for i, source in enumerate(recipe.data.sources):
        if source.format != "hf_hub":
            continue
        for path in [source.path] if isinstance(source.path, str) else source.path:
            if not hub_dataset_cached(path) and (why := _hub_out_of_reach(path, "dataset")):
                fetch = hub_dataset_fetch(path, source.subset, source.revision, source.data_files, source.split)
                report.add(("data", "sources", i, "path"), f"Hub dataset {path} is not cached here, and {why}: "
                           f"fetch it where there is network (HF_HOME=DIR {fetch}) and run with that HF_HOME")


def _read_json(path: Path, loc: tuple[Any, ...], report: Report, missing: str) -> dict | None:
    if not path.exists():
        if missing:
            report.add(loc, f"{path.parent} {missing}")
        return None
    if file_kind(path.stat().st_mode) is not None:
        return None  # a FIFO or the like: `irregular_files` reported it
    try:
        value = read_input_json(path, path.name)
    except LangadaptError as exc:
        report.add(loc, str(exc))
        return None
    if not isinstance(value, dict):
        report.add(loc, f"{path}: expected a JSON object")
        return None
    return value


def _check_positions(recipe: Recipe, name: str, config: dict | None, report: Report) -> None:
    """A sequence longer than the model's positions trains on garbage (or fails on the GPU)."""
    if not config:
        return
    key = next((k for k in POSITION_KEYS if isinstance(config.get(k), int)), None)
    seq_len = getattr(recipe, name).seq_len
    if key is not None and seq_len > config[key]:
        source = "base_model.architecture" if recipe.base_model.path is None else f"{recipe.base_model.path}/config.json"
        report.add((name, "seq_len"), f"{seq_len} is more than the model's {key} {config[key]} ({source})")


def _check_embedding_files(recipe: Recipe, report: Report) -> None:
    cfg = recipe.embeddings
    if recipe.init != "warm" or cfg.method != "wechsel":
        return
    for key in ("source_vectors", "target_vectors", "dictionary"):
        path = getattr(cfg, key)
        if path is None:
            continue
        if not Path(path).exists():
            report.add(("embeddings", key), f"file {path} not found")
        elif problem := input_problem(path):
            report.add(("embeddings", key), problem)


def _check_head_init(recipe: Recipe, config: dict | None, report: Report) -> None:
    """A tied base has one matrix: its head rows are its input rows, so only `same` can hold (the
    embeddings stage refuses it too, with the same `head_init_problem`; here it is said before data
    and tokenizer)."""
    if recipe.init != "warm" or config is None:
        return
    if problem := head_init_problem(recipe.embeddings.head_init, ties_embeddings(config)):
        report.add(("embeddings", "head_init"), problem)


def _check_suites(recipe: Recipe, report: Report) -> None:
    """Suite files exist, parse and name known task kinds; lm_eval tasks need lm-eval installed."""
    from langadapt.evaluation.suite import (
        LmEvalTask,
        MinimalPairsTask,
        TranslationTask,
        load_suite,
        unmeasured,
    )
    from langadapt.evaluation.task_data import read_minimal_pairs, read_translation

    for i, path in enumerate(recipe.evaluation.suites):
        try:
            suite = load_suite(path)
        except LangadaptError as exc:
            report.add(("evaluation", "suites", i), str(exc))
            continue
        if problem := unmeasured(suite, _held_out_langs(recipe)):
            report.add(("evaluation", "suites", i), problem)
        if any(isinstance(t, LmEvalTask) for t in suite.tasks) and importlib.util.find_spec("lm_eval") is None:
            report.add(("evaluation", "suites", i), f"{path} has lm_eval tasks: pip install 'langadapt[eval]'")
        for task in suite.tasks:  # read now, not after training: a bad row names its file and line
            try:
                if isinstance(task, MinimalPairsTask):
                    read_minimal_pairs(task.path)
                elif isinstance(task, TranslationTask):
                    read_translation(task.path, task.langs(), task.num_fewshot, f"{path}: task {task.name!r}")
            except LangadaptError as exc:
                report.add(("evaluation", "suites", i), str(exc))


def check_licence(recipe: Recipe, will: Collection[str]) -> None:
    """`export.license` is needed when the run will export (`will`: the stages it runs) and a source
    the training stages will stream carries a restrictive licence note: known from the notes beside
    its files, so said before training, not after it (a fetched source's note exists only after the
    data stage: the pipeline checks again then, `Stage.check_after`)."""
    if "export" not in will or not recipe.export.enabled:
        return
    from langadapt.export.provenance import RunFacts
    from langadapt.export.provenance import check_licence as check_card_licence
    from langadapt.recipe.replay import stage_mixture

    try:
        planned = {name: {source: int(bool(entry.get("epochs") or entry.get("weight")))
                          for source, entry in stage_mixture(recipe.data, name, getattr(recipe, name)).items()}
                   for name in recipe.training_stages}
    except LangadaptError:  # a mixture that names no source: the epochs check reports it, once
        return
    check_card_licence(recipe.export, RunFacts.from_recipe(recipe), planned)  # its error carries its key: located


def _held_out_langs(recipe: Recipe) -> set[str]:
    """The languages the data stage will hold text out for: sources with a `valid_path`, or all
    of them when `valid_fraction` is above 0 (as `data.stage` splits them)."""
    return {s.lang for s in recipe.data.sources if s.valid_path is not None or recipe.data.valid_fraction > 0}
