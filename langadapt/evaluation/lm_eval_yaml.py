"""An lm_eval task's `include_path` read as lm-evaluation-harness reads it, without lm-eval or torch:
every task YAML parses, every task the suite names is there, every local data file it reads exists.

lm-eval indexes every `*.yaml` under the folder and skips, silently, one that does not parse; the
task it defined is then "not a registered task" seconds later, with neither the file nor the YAML
error named. A task whose `data_files` is missing loads the model first and then fails as a
FileNotFoundError traceback. `include_path_problem` says either in one line before anything loads;
`suite.load_suite` calls it, so the run's preflight, the evaluate stage and `langadapt eval` all do.

What is read mirrors lm-eval 0.4's task index (`lm_eval.tasks._index`, `_yaml_loader`): the
`!function` tag, `include:` (relative to the including file, local keys win), tasks, groups and
tags. Relative data files are looked for where a loader could read them: beside the module of a
`custom_dataset: !function` (eval/lm_eval_tasks/local_data.py reads them there), the task file's
folder and the working directory (`datasets`' packaged loaders read them there). Only a file found
in none of them is a problem; URLs and glob patterns with a match pass.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from langadapt.errors import LangadaptError
from langadapt.inputs.files import file_kind, read_input_bytes
from langadapt.recipe.strict_yaml import MAX_FILE_BYTES

IGNORED_FOLDERS = {"__pycache__", ".ipynb_checkpoints"}
"""Folders lm-eval's index does not walk into."""
GLOB = set("*?[")


@dataclass(frozen=True)
class Function:
    """A `!function module.name` value: the module is looked for beside the YAML that names it."""

    folder: Path
    spec: str

    def module_folder(self) -> Path:
        module = self.spec.rpartition(".")[0].replace(".", "/")
        return (self.folder / module).parent


@dataclass
class TaskFile:
    """One name of the index: a task or group (its YAML file and settings, includes merged), or a
    tag (no file of its own); `tagged` are the tasks that carry the name as their tag."""

    path: Path | None
    config: dict[str, Any]
    tagged: list[str] = field(default_factory=list)


class _BadFile(Exception):
    """A task YAML lm-eval would skip: the message says which file and why."""


def _loader(folder: Path) -> type[Any]:
    """lm-eval's YAML loader for a file in `folder`: libyaml's safe loader where there is libyaml,
    else PyYAML's full one, with `!function` kept as a `Function`."""
    base = yaml.CSafeLoader if getattr(yaml, "__with_libyaml__", False) else yaml.FullLoader

    class Loader(base):  # type: ignore[valid-type,misc]
        pass

    Loader.add_constructor("!function", lambda loader, node: Function(folder, loader.construct_scalar(node)))
    return Loader


def _load(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any] | None:
    """The settings of one task YAML with its includes merged; None when it is not a mapping (lm-eval
    skips it, and so may a helper file); `_BadFile` when it does not parse or an include is missing."""
    try:
        if kind := file_kind(path.stat().st_mode):  # reading a FIFO would block
            raise _BadFile(f"{path} is not a regular file ({kind})")
        text = read_input_bytes(path, "lm-eval task YAML", MAX_FILE_BYTES)
        config = yaml.load(text, Loader=_loader(path.parent))  # lm-eval's loader (builds no objects)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        what = ", ".join(" ".join(part.split()) for part in (exc.problem, exc.context) if part) or type(exc).__name__
        raise _BadFile(f"{where}: not valid YAML ({what})") from None
    except yaml.YAMLError as exc:
        raise _BadFile(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from None
    except OSError as exc:
        raise _BadFile(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except LangadaptError as exc:  # unreadable or over a recipe's size (read whole)
        raise _BadFile(str(exc)) from None
    if not isinstance(config, dict):
        return None
    includes = config.pop("include", None)
    if includes is None:
        return config
    merged: dict[str, Any] = {}
    for name in includes if isinstance(includes, list) else [includes]:
        included = path.parent / str(name)
        if not included.is_file():
            raise _BadFile(f"{path}: include {name} not found ({included})")
        chain = (*seen, path.resolve())
        if included.resolve() in chain:
            raise _BadFile(f"{path}: include {name} closes a circle of includes")
        inner = _load(included, chain)
        if inner is None:
            raise _BadFile(f"{path}: include {name} is not a mapping of task settings")
        inner.pop("task_list", None)
        merged.update(inner)
    merged.update(config)
    return merged


def task_index(folder: Path) -> dict[str, TaskFile] | str:
    """lm-eval's index of `folder` (task, group and tag names), or the first task YAML it would skip
    for a parse error or a missing include."""
    index: dict[str, TaskFile] = {}
    paths = sorted((p for p in folder.glob("**/*.yaml") if not IGNORED_FOLDERS & set(p.parts)), key=Path.as_posix)
    for path in paths:
        try:
            config = _load(path)
        except _BadFile as exc:
            return str(exc)
        if config is None:
            continue
        group = "group" in config and "class" not in config
        name = config.get("group") if group else config.get("task")
        if not isinstance(name, str) or name in index:  # lm-eval keeps the first of a name
            continue
        index[name] = TaskFile(path, config)
        tags = [] if group else config.get("tag")
        for tag in [tags] if isinstance(tags, str) else tags if isinstance(tags, list) else []:
            if isinstance(tag, str):
                index.setdefault(tag, TaskFile(None, {})).tagged.append(name)
    return index


def data_files(config: dict[str, Any]) -> Iterator[str]:
    """The local files a task's settings name: `dataset_kwargs.data_files` (a file, a list, or
    split -> file(s)) and a `dataset_path` written as a path (`/...`, `./...`, `../...`, `~/...`)."""
    kwargs = config.get("dataset_kwargs")
    files = kwargs.get("data_files") if isinstance(kwargs, dict) else None
    for value in files.values() if isinstance(files, dict) else [files]:
        for name in value if isinstance(value, list) else [value]:
            if isinstance(name, str) and "://" not in name:
                yield name
    path = config.get("dataset_path")
    if isinstance(path, str) and path.startswith(("/", "./", "../", "~")):
        yield path


def _located(name: str, folders: list[Path]) -> list[Path]:
    """Where `name` is: as it is when absolute, else in the first of `folders` that has it (a glob
    pattern: every file it matches there); empty when it is nowhere."""
    path = Path(name).expanduser()
    for candidate in [path] if path.is_absolute() else [folder / path for folder in folders]:
        if not GLOB & set(name) and candidate.exists():
            return [candidate]
        if GLOB & set(name) and candidate.parent.is_dir() and (matches := sorted(candidate.parent.glob(candidate.name))):
            return matches
    return []


def _search_folders(entry: TaskFile) -> list[Path]:
    """Where a task's relative data files are looked for, in order: beside the module of its
    `custom_dataset: !function` (else the working directory), its YAML's folder, the working directory."""
    custom = entry.config.get("custom_dataset")  # first: where the task's loader reads a relative file
    first = custom.module_folder() if isinstance(custom, Function) else Path.cwd()
    return list(dict.fromkeys([first, entry.path.parent, Path.cwd()]))  # type: ignore[union-attr]  # a task's file


def _reachable(index: dict[str, TaskFile], names: list[str]) -> Iterator[tuple[str, TaskFile]]:
    """(task name, its file) for every task that `names` (tasks, groups, tags) runs, once each."""
    todo, seen = list(names), set()
    while todo:
        name = todo.pop(0)
        entry = index.get(name) if isinstance(name, str) else None
        if entry is None or name in seen:
            continue
        seen.add(name)
        children = entry.config.get("task")
        if isinstance(children, list):  # a group
            todo += [c if isinstance(c, str) else c.get("task") for c in children if isinstance(c, (str, dict))]
        elif entry.path is not None:
            yield name, entry
        todo += entry.tagged


def include_path_problem(folder: Path, names: list[str], include_defaults: bool) -> str | None:
    """Why lm-eval tasks `names` from `folder` would fail after the model loaded, or None: a task
    YAML there that lm-eval would skip (`path:line:column` and the YAML error), a name no file
    defines when lm-eval's own tasks are not indexed (`include_defaults: false`), a data file a
    named task reads that is missing. Names lm-eval's own index may hold are not judged."""
    index = task_index(folder)
    if isinstance(index, str):
        return f"lm-eval task file {index}; lm-eval would skip it and not know its task"
    if not include_defaults:
        for name in names:
            if name not in index and not GLOB & set(name) and not Path(name).is_file():
                close = difflib.get_close_matches(name, list(index), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                return (f"lm-eval task {name!r} is defined by no task YAML in {folder}{hint}; lm-eval's own "
                        "tasks are not indexed (include_defaults: false)")
    for name, entry in _reachable(index, names):
        folders = _search_folders(entry)
        for file in data_files(entry.config):
            if not _located(file, folders):
                missing = Path(file).expanduser()
                missing = missing if missing.is_absolute() else (folders[0] / missing).resolve()
                return f"lm-eval task {name!r} ({entry.path}) reads data file {missing}, which is missing"
    return None


def task_data_files(folder: Path, names: list[str]) -> list[Path]:
    """The local data files (or folders) that the tasks `names` of include folder `folder` read, found
    where `include_path_problem` looks for them, inside the folder or outside it (`../data/x.jsonl`):
    what the evaluate stage's print hashes beside the folder itself (`suite.suite_inputs`). A file
    found nowhere, and a folder lm-eval would not index, add nothing: the suite's check refuses them."""
    index = task_index(folder)
    if isinstance(index, str):
        return []
    found = [path.resolve() for _, entry in _reachable(index, names) for file in data_files(entry.config)
             for path in _located(file, _search_folders(entry))]
    return list(dict.fromkeys(found))
