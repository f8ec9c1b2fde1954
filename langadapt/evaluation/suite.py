"""Evaluation suites: YAML lists of tasks, validated up front so a typo fails before any model loads.

A suite file looks like

    name: monolingual
    description: the target language
    tasks:
      - {kind: bpb, langs: [nb, nn]}
      - {kind: minimal_pairs, name: nb_pairs, lang: nb, path: data/nb_minimal_pairs.jsonl}

Relative data paths resolve against the suite file's folder, so a suite and its data move
together and nothing depends on the working directory. Every problem is one line naming the
suite file (with the line), the task and what is wrong. `load_suite` checks files and names
(the run's preflight, the evaluate stage and `langadapt eval` all call it); `check_suite_inputs`
reads what a suite's tasks read, without torch, for `langadapt eval` before any import of it.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, ValidationError, field_validator

from langadapt.errors import LangadaptError
from langadapt.evaluation.lm_eval_yaml import IGNORED_FOLDERS, include_path_problem, task_data_files
from langadapt.evaluation.task_data import read_minimal_pairs
from langadapt.inputs.compression import input_problem
from langadapt.inputs.files import file_kind
from langadapt.recipe.base import Config
from langadapt.recipe.errors import dotted, read_yaml_mapping, suggest, yaml_line
from langadapt.recipe.hints import pip_install

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The checkout that holds `eval/` (relative suite paths fall back to it)."""


class _Task(Config):
    name: str = ""
    """Task name used in results and the report; defaults to the kind (made unique per suite)."""


class BpbTask(_Task):
    """Held-out bits-per-byte and word perplexity per language."""

    kind: Literal["bpb"]
    """Task kind."""
    langs: list[str] = Field(default_factory=list)
    """Languages scored on the run's held-out split (`data/valid`); absent ones are skipped with a note."""
    files: dict[str, list[str]] = Field(default_factory=dict)
    """Language -> local files (.jsonl/.jsonl.gz with a `text` key, or plain text: one document per file)."""


class TokenizerMetricsTask(_Task):
    """Fertility, split share and bytes per token of every distinct tokenizer among the models."""

    kind: Literal["tokenizer_metrics"]
    """Task kind."""
    langs: list[str]
    """Languages measured on the held-out text that the bpb tasks use."""


class MinimalPairsTask(_Task):
    """Share of {"good", "bad"} sentence pairs where the model prefers the grammatical one."""

    kind: Literal["minimal_pairs"]
    """Task kind."""
    lang: str
    """Language of the pairs (for grouping in the report)."""
    path: str
    """JSONL file, one {"good": ..., "bad": ...} object a line."""


class LmEvalTask(_Task):
    """lm-evaluation-harness tasks run on the in-memory model (needs `pip install 'langadapt[eval]'`)."""

    kind: Literal["lm_eval"]
    """Task kind."""
    tasks: list[str] = Field(min_length=1)
    """lm-eval task or group names (e.g. ncb, norbelebele_p0) or names from `include_path`."""
    include_path: str | None = None
    """Folder of custom lm-eval task YAMLs (local data, no network)."""
    include_defaults: bool = True
    """Also index lm-eval's built-in tasks (slow to index; turn off for local-only tasks)."""
    num_fewshot: int | None = None
    """Few-shot examples; None = each task's default."""
    limit: float | None = None
    """Documents per task (int) or fraction (<1); None = all."""


class GenerateTask(_Task):
    """A few samples per language from fixed prompts (decoding options: `evaluation.generate`)."""

    kind: Literal["generate"]
    """Task kind."""
    prompts: dict[str, list[str]]
    """Language -> prompts."""


class TranslationTask(_Task):
    """Few-shot translation of parallel paragraphs, greedy, scored with sacrebleu's chrF and BLEU
    (`langadapt.evaluation.translation`)."""

    kind: Literal["translation"]
    """Task kind."""
    path: str
    """JSONL, one object a line with a string per language code: {"nb": ..., "en": ...} (eval/README.md)."""
    directions: list[str] = Field(min_length=1)
    """Directions as SRC-TGT language codes, keys of the file's objects: [nb-en, en-nb]."""
    num_fewshot: int = Field(1, ge=0)
    """Examples in each prompt: the file's first pairs, which are then not scored."""
    max_new_tokens: int = Field(96, ge=1)
    """Generation cap per translation (it stops earlier at the first newline)."""
    limit: int | None = Field(None, ge=1)
    """Pairs scored per direction (after the examples); None = all."""
    names: dict[str, str] = Field(default_factory=dict)
    """How the prompt names each language ({nb: Norwegian Bokmål}); default: its code."""
    models: list[str] | None = Field(None, min_length=1)
    """The models that translate, by their evaluation names (base, init, init_random, stage1, adapted,
    cold, a `--compare` name), e.g. [base, adapted, cold]; None: every model. Generation is the
    slowest task per model (a greedy decode per pair and direction), and models that cannot change
    the answer a task asks (init_random and stage1 when it compares adapted with base and cold) need
    not pay for it. The default stays every model: the same suite serves `langadapt eval` on folders
    of any name, where no smaller set is known to be the right one."""

    @field_validator("models")
    @classmethod
    def _distinct_names(cls, models: list[str] | None) -> list[str] | None:
        if models is not None:
            if any(not name.strip() for name in models):
                raise ValueError("a model name is empty")
            if len(set(models)) != len(models):
                raise ValueError(f"a model is named twice in {models}")
        return models

    @field_validator("directions")
    @classmethod
    def _pairs_of_codes(cls, directions: list[str]) -> list[str]:
        for direction in directions:
            src, _, tgt = direction.partition("-")
            if not src or not tgt or src == tgt or "-" in tgt:
                raise ValueError(f"direction {direction!r} is not SRC-TGT with two different codes (e.g. nb-en)")
        return directions

    def langs(self) -> list[str]:
        """The language codes the directions read, in order of first use."""
        return list(dict.fromkeys(code for d in self.directions for code in d.split("-")))


Task = BpbTask | TokenizerMetricsTask | MinimalPairsTask | LmEvalTask | GenerateTask | TranslationTask
KINDS: dict[str, type[_Task]] = {
    "bpb": BpbTask,
    "tokenizer_metrics": TokenizerMetricsTask,
    "minimal_pairs": MinimalPairsTask,
    "lm_eval": LmEvalTask,
    "generate": GenerateTask,
    "translation": TranslationTask,
}


class Suite(Config):
    """A named list of tasks loaded from one YAML file."""

    name: str
    """Suite name (a section of the report)."""
    description: str = ""
    """What the suite measures, shown in the report."""
    tasks: list[Task] = Field(min_length=1)
    """The tasks, run in order on every model."""
    source: str = ""
    """The file the suite was loaded from (set by `load_suite`; used in messages)."""


def resolve_suite_path(path: str | Path) -> Path:
    """A suite path as given, else relative to the langadapt checkout (so recipes work from anywhere)."""
    path = Path(path)
    if path.is_file() or path.is_absolute():
        return path
    fallback = REPO_ROOT / path
    return fallback if fallback.is_file() else path


def load_suite(path: str | Path) -> Suite:
    """Load and validate a suite; data paths become absolute and must exist."""
    path = resolve_suite_path(path)
    if path.exists() and (kind := file_kind(path.stat().st_mode)):  # reading a FIFO would block
        raise LangadaptError(f"{path}: suite file is not a regular file ({kind})")
    tree, root = read_yaml_mapping(path, "suite")
    if not isinstance(tree, dict) or not isinstance(tree.get("tasks"), list):
        raise LangadaptError(f"{path}: a suite is a mapping with a `tasks:` list")
    tasks = [_load_task(path, root, i, raw) for i, raw in enumerate(tree["tasks"])]
    _name_tasks(tasks)
    header = {k: v for k, v in tree.items() if k != "tasks"}
    header.setdefault("name", path.stem)
    try:
        return Suite(**header, tasks=tasks, source=str(path))
    except ValidationError as exc:
        err = exc.errors()[0]
        line = yaml_line(root, err["loc"])
        raise LangadaptError(f"{path}:{line or 1}: {dotted(err['loc'])}: {err['msg']}") from None


def _load_task(path: Path, root: yaml.Node, index: int, raw: object) -> Task:
    """Validate one task entry; the message names the suite file, line, task and key."""
    label = f"task #{index + 1}"
    if isinstance(raw, dict) and raw.get("name"):
        label += f" {raw['name']!r}"
    where = f"{path}:{yaml_line(root, ('tasks', index)) or 1}"
    if not isinstance(raw, dict) or "kind" not in raw:
        raise LangadaptError(f"{where}: {label}: needs a `kind:` (one of {', '.join(KINDS)})")
    model = KINDS.get(raw["kind"])
    if model is None:
        raise LangadaptError(
            f"{where}: {label}: unknown task kind {raw['kind']!r} (expected one of {', '.join(KINDS)})"
        )
    try:
        task = model.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ("tasks", index, *err["loc"])
        where = f"{path}:{yaml_line(root, loc) or 1}"
        what = "unknown key" + suggest(model, err["loc"]) if err["type"] == "extra_forbidden" else err["msg"]
        raise LangadaptError(f"{where}: {label} ({raw['kind']}): {dotted(err['loc'])}: {what}") from None
    return _resolve_paths(task, path.parent, f"{where}: {label} ({task.kind})")


def _resolve_paths(task: Task, base: Path, where: str) -> Task:
    """Make data paths absolute (relative to the suite's folder) and check that they exist; an
    lm_eval task's `include_path` is read as lm-eval reads it (`lm_eval_yaml.include_path_problem`:
    task YAMLs that parse, the tasks named there, their data files)."""

    def check(value: str) -> str:
        resolved = Path(value).expanduser()
        resolved = resolved if resolved.is_absolute() else (base / resolved).resolve()
        if not resolved.exists():
            raise LangadaptError(f"{where}: data file not found: {resolved}")
        if not (isinstance(task, LmEvalTask) and resolved.is_dir()) and (problem := input_problem(resolved)):
            raise LangadaptError(f"{where}: {problem}")
        return str(resolved)

    task = _with_data_paths(task, check)
    if isinstance(task, LmEvalTask) and task.include_path and (
            problem := include_path_problem(Path(task.include_path), task.tasks, task.include_defaults)):
        raise LangadaptError(f"{where}: {problem}")
    return task


def _with_data_paths(task: Task, change: Callable[[str], str]) -> Task:
    """`task` with every data path it names passed through `change`: the one list of the task fields
    that name files, for the loader (`_resolve_paths`) and the evaluate stage's print (`suite_inputs`)."""
    if isinstance(task, (MinimalPairsTask, TranslationTask)):
        return task.model_copy(update={"path": change(task.path)})
    if isinstance(task, BpbTask):
        return task.model_copy(update={"files": {k: [change(p) for p in v] for k, v in task.files.items()}})
    if isinstance(task, LmEvalTask) and task.include_path:
        return task.model_copy(update={"include_path": change(task.include_path)})
    return task


def suite_inputs(paths: list[str]) -> tuple[tuple[str, Path], ...]:
    """The files the suites at `paths` read, resolved by the loader itself (`load_suite`: the suite
    file through the checkout fallback, its tasks' data paths against its folder), each under a name
    that does not depend on where it was found: the suite as the recipe names it, and a data file's
    path relative to the suite's folder (`eval/multilingual.yaml:data/en_minimal_pairs.jsonl`). The
    evaluate stage's print hashes them, so editing a pairs file re-runs evaluate, and running from
    another working directory hashes the same files under the same names.

    An lm_eval task's `include_path` counts with every file lm-eval would index there (less
    `__pycache__` and hidden files) and the data files its named tasks read, outside that folder too
    (`lm_eval_yaml.task_data_files`: `dataset_kwargs.data_files`, a local `dataset_path`). A suite
    that does not load yet (a data file missing) counts its own file alone: the run's preflight
    refuses it before evaluate runs, and the print changes once it loads."""
    found: list[tuple[str, Path]] = []
    for given in paths:
        path = resolve_suite_path(given)
        found.append((str(given), path))
        try:
            suite = load_suite(path)
        except LangadaptError:
            continue
        folder = path.parent.resolve()
        for task in suite.tasks:
            for data in [*_data_paths(task), *_lm_eval_data(task)]:
                found += [(f"{given}:{os.path.relpath(file, folder)}", file) for file in _read_files(data)]
    return tuple(dict.fromkeys(found))


def _data_paths(task: Task) -> list[Path]:
    """The data paths `task` names (after `load_suite`: resolved), in the loader's order."""
    named: list[Path] = []
    _with_data_paths(task, lambda value: named.append(Path(value)) or value)
    return named


def _lm_eval_data(task: Task) -> list[Path]:
    """The data files an lm_eval task's named tasks read (after `load_suite`: its `include_path` resolved)."""
    if not (isinstance(task, LmEvalTask) and task.include_path):
        return []
    return task_data_files(Path(task.include_path), task.tasks)


def _read_files(path: Path) -> list[Path]:
    """A data file itself; an lm_eval `include_path` folder's files as lm-eval indexes the folder
    (`lm_eval_yaml.IGNORED_FOLDERS` and hidden files left out: a `.pyc` written beside a task's
    `!function` module changes nothing it reads)."""
    if not path.is_dir():
        return [path]
    return sorted(f for f in path.rglob("*") if f.is_file() and not any(
        part in IGNORED_FOLDERS or part.startswith(".") for part in f.relative_to(path).parts))


def _name_tasks(tasks: list[Task]) -> None:
    """Default names: the kind, numbered when a suite has several tasks of one kind."""
    seen: dict[str, int] = {}
    for task in tasks:
        base = task.name or task.kind
        seen[base] = seen.get(base, 0) + 1
        task.name = base if seen[base] == 1 else f"{base}_{seen[base]}"


def unmeasured(suite: Suite, langs_with_text: Collection[str]) -> str | None:
    """Why `suite` would measure nothing, given the languages that have held-out text; None when
    some task measures something.

    bpb and tokenizer_metrics tasks skip a language without text (a note in the report), so a
    suite of only such tasks whose every language lacks text scores nothing, and a run would
    finish with an empty report marked complete. The pipeline's evaluate stage refuses that
    (`plan.plan_suites`), and the preflight check predicts it from the recipe's sources first,
    with this same function. Minimal pairs, lm-eval, translation, generation and bpb `files` always measure."""
    wanted: list[str] = []
    for task in suite.tasks:
        if not isinstance(task, (BpbTask, TokenizerMetricsTask)) or (isinstance(task, BpbTask) and task.files):
            return None
        if any(lang in langs_with_text for lang in task.langs):
            return None
        wanted += [lang for lang in task.langs if lang not in wanted]
    have = ", ".join(sorted(langs_with_text)) or "none"
    return (f"suite {suite.name} ({suite.source}) would measure nothing: no held-out text for "
            f"{', '.join(wanted) or 'any language (no langs listed)'} (held-out languages: {have}); "
            "add a source in that language, or give the bpb task `files`")


def load_suites(paths: list[str | Path]) -> list[Suite]:
    """Load several suites; suite names must differ (results key tasks as `suite/task`)."""
    suites = [load_suite(p) for p in paths]
    seen: dict[str, str] = {}
    for suite in suites:
        if suite.name in seen:
            raise LangadaptError(
                f"{suite.source}: suite name {suite.name!r} is also used by {seen[suite.name]}"
            )
        seen[suite.name] = suite.source
    return suites


def check_suite_inputs(suite: Suite) -> None:
    """Raise LangadaptError for what the suite's tasks would find wrong after torch loaded: lm-eval
    not installed where a task needs it (found without importing it), a minimal-pairs file that does
    not read (its line named). The checks the run's preflight makes of a suite beyond `load_suite`."""
    for task in suite.tasks:
        if isinstance(task, LmEvalTask) and importlib.util.find_spec("lm_eval") is None:
            raise LangadaptError(f"{suite.source}: task {task.name!r}: lm-eval tasks need lm-evaluation-harness, "
                                 f"which is not installed; run: {pip_install('langadapt[eval]')}")
        if isinstance(task, MinimalPairsTask):
            read_minimal_pairs(task.path)
