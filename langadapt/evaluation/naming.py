"""Names for the models `langadapt eval` compares: unique, and saying where each model came from.

Every export is a folder called `model` (`runs/<run>/export/model`, `runs/<run>/stage2/model`),
so a folder's own name says nothing and two of them would overwrite each other's column. A
model gets, in this order: the name the user gave (`--name`, `--compare NAME=PATH`); else the
run and stage it came from (`tiny_norwegian_warm/stage2`, as `RunLayout` places stage models);
else its folder name. Names that still collide get their parent folders prepended until they
differ (`a/model`, `b/model`), and a numeric suffix as a last resort (two paths to one folder).
The output folder and results file are named here too: the CLI checks them before torch loads.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from langadapt.errors import LangadaptError
from langadapt.run.layout import MODEL_STAGES, RunLayout
from langadapt.run.layout import RESULTS as RESULTS  # a report folder's numbers (what eval won't overwrite)


def derived_name(path: Path) -> str:
    """`<run>/<stage>` for a stage's model folder of a run directory, else the folder's name."""
    resolved = Path(path).resolve()
    layout = RunLayout(resolved.parent.parent)
    stage_models = {layout.trained(stage).model: stage for stage in MODEL_STAGES.values()}
    stage_models[layout.export.model] = "export"
    stage = stage_models.get(resolved)
    return f"{layout.root.name}/{stage}" if stage else resolved.name


def split_named(entry: str) -> tuple[str | None, str]:
    """`NAME=PATH` -> (NAME, PATH); a plain path (or one that exists with an '=' in it) -> (None, PATH)."""
    name, sep, path = entry.partition("=")
    if not sep or Path(entry).exists() or not name:
        return None, entry
    return name, path


def unique_names(paths: list[Path], given: list[str | None], taken: set[str] = frozenset()) -> list[str]:
    """One name per path: the given one, else `derived_name`, made unique among themselves and `taken`.

    Two models given the same name (or a given name already taken) is the user's error: it is
    reported, never silently merged into one column.
    """
    explicit = [name for name in given if name is not None]
    for name in explicit:
        if explicit.count(name) > 1 or name in taken:
            raise LangadaptError(f"eval: model name {name!r} is used twice; give each model its own --name")
    reserved = set(taken) | set(explicit)
    names = list(given)
    resolved = [Path(path).resolve() for path in paths]
    pending = [i for i, name in enumerate(given) if name is None]
    for depth in range(max((len(resolved[i].parts) for i in pending), default=0)):
        # depth 0: where the model came from; then more and more of its path (a/model, b/model)
        candidates = {i: derived_name(paths[i]) if depth == 0 else "/".join(resolved[i].parts[-depth - 1:])
                      for i in pending}
        counts = Counter(candidates.values())
        for i, candidate in candidates.items():
            if counts[candidate] == 1 and candidate not in reserved:
                names[i] = candidate
                reserved.add(candidate)
        pending = [i for i in pending if names[i] is None]
    for i in pending:  # the same folder given twice: nothing in its path tells the copies apart
        base, suffix = derived_name(paths[i]), 1
        while (candidate := base if suffix == 1 else f"{base}#{suffix}") in reserved:
            suffix += 1
        names[i] = candidate
        reserved.add(candidate)
    return [str(name) for name in names]


def out_folder_name(name: str) -> str:
    """`eval_<name>` with path separators flattened: `eval_tiny_norwegian_warm_stage2`."""
    return "eval_" + name.replace("/", "_").replace("#", "_")
