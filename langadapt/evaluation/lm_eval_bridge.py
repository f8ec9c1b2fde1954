"""lm-evaluation-harness tasks on an in-memory model, through its Python API.

lm-eval is an optional extra (`pip install 'langadapt[eval]'`): it pulls in a large dependency
tree that the core toolkit does not need. `require_lm_eval` is called while planning, so a suite
that asks for lm-eval tasks fails before the first model is loaded, with the install hint.

Hub datasets: `prepare_lm_eval` indexes the tasks once (the index is reused for every model) and
checks that each Hub dataset they read is cached or reachable, also before the first model loads.
A compute node without the Hub (HF_HUB_OFFLINE=1, or no route to it) would otherwise load the
model, then end in a ConnectionError traceback from `datasets`; it gets one line naming the
dataset and the two-step route instead: fill a cache where there is network, run from the copy.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from langadapt.errors import LangadaptError
from langadapt.evaluation.bpb import default_batch_size, model_device
from langadapt.evaluation.suite import LmEvalTask
from langadapt.recipe.evaluation import EvaluationConfig
from langadapt.recipe.hints import hub_dataset_fetch, pip_install
from langadapt.run.base_model import hub_dataset_cached, hub_offline, hub_reachable

INSTALL_HINT = pip_install("langadapt[eval]")


def require_lm_eval(where: str) -> None:
    """Raise a one-line error with the install hint when lm-eval cannot be imported."""
    try:
        import lm_eval  # noqa: F401
        from lm_eval.models.huggingface import HFLM  # noqa: F401
    except ImportError:
        raise LangadaptError(
            f"{where}: lm-eval tasks need lm-evaluation-harness, which is not installed; run: {INSTALL_HINT}"
        ) from None


def prepare_lm_eval(task: LmEvalTask, where: str) -> Any:
    """lm-eval's task index for `task`, after checking that every Hub dataset it reads can be had.

    Called while planning: indexing lm-eval's built-in tasks takes seconds, so it is done once per
    task rather than once per model, and a dataset that cannot be had fails before any model loads.
    """
    require_lm_eval(where)
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=task.include_path, include_defaults=task.include_defaults)
    offline = hub_offline()
    reachable: bool | None = None  # probed once, on the first dataset that is not cached
    for name, (path, config_name) in hub_datasets(manager, task.tasks):
        if hub_dataset_cached(path):
            continue
        if not offline and reachable is None:
            reachable = hub_reachable(path, "dataset")
        if offline or not reachable:
            why = "HF_HUB_OFFLINE is set" if offline else "the Hugging Face Hub cannot be reached"
            raise LangadaptError(
                f"{where}: lm-eval task {name!r} reads the Hub dataset {path}, which is not cached here "
                f"and {why}; {fetch_hint(path, config_name)}"
            )
    return manager


def fetch_hint(path: str, config_name: str | None) -> str:
    """How to run a Hub dataset offline: the same two steps as for a data source
    (`recipe.hints.hub_dataset_fetch`: the dataset and its config, into the `datasets` cache)."""
    return (f"where there is network run HF_HOME=DIR {hub_dataset_fetch(path, config_name)}, "
            "then copy DIR here and run with HF_HOME=DIR HF_HUB_OFFLINE=1 (eval/README.md)")


def hub_datasets(manager: Any, names: list[str]) -> Iterator[tuple[str, tuple[str, str | None]]]:
    """(lm-eval task, (Hub dataset, config)) for the tasks, groups and tags `names`, from the index
    alone (no task is built: building one downloads its data). Local loaders (`json`, a folder,
    a `custom_dataset` function) are not Hub datasets; a name the index lacks is lm-eval's to report."""
    from datasets.packaged_modules import _PACKAGED_DATASETS_MODULES

    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop(0)
        entry = manager.task_index.get(name) if isinstance(name, str) else None
        if entry is None or name in seen:
            continue
        seen.add(name)
        cfg = entry.cfg or {}
        children = cfg.get("task") if isinstance(cfg.get("task"), list) else []
        todo += [c if isinstance(c, str) else c.get("task") for c in children] + sorted(entry.tags)
        path = cfg.get("dataset_path")
        if (isinstance(path, str) and not children and "custom_dataset" not in cfg
                and path not in _PACKAGED_DATASETS_MODULES and not Path(path).exists()):
            yield name, (path, cfg.get("dataset_name"))


def run_lm_eval(
    model: Any, tokenizer: Any, task: LmEvalTask, config: EvaluationConfig, manager: Any = None
) -> dict[str, dict]:
    """{lm-eval task name: {metric: value}} for `task.tasks` on this model.

    The model is wrapped as `HFLM(pretrained=model, tokenizer=tokenizer)`, so the weights already
    in memory are evaluated (no reload, no Hub access for the model). `max_length` is our scoring
    window, so lm-eval's rolling-loglikelihood tasks use the same windows as our bpb. `manager` is
    `prepare_lm_eval`'s index (built here when absent); a Hub that drops away after planning is
    still one line.
    """
    import lm_eval
    from lm_eval.models.huggingface import HFLM

    manager = manager if manager is not None else prepare_lm_eval(task, f"lm_eval task {task.name!r}")
    batch_size = config.batch_size or default_batch_size(model_device(model))
    limit = int(task.limit) if task.limit is not None and task.limit >= 1 else task.limit
    try:
        with quiet_harness():
            lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, max_length=config.window)
            out = lm_eval.simple_evaluate(
                model=lm,
                tasks=list(task.tasks),
                num_fewshot=task.num_fewshot,
                limit=limit,
                task_manager=manager,
                log_samples=False,
                bootstrap_iters=0,
                random_seed=0,
            )
    except (KeyError, ValueError) as exc:  # lm-eval reports unknown task names this way
        raise LangadaptError(f"lm_eval task {task.name!r}: {exc}".replace("\n", " ")) from None
    except Exception as exc:
        if not _connection_error(exc):
            raise
        hubs = sorted({(path, cfg) for _, (path, cfg) in hub_datasets(manager, task.tasks)}, key=str)
        what = ", ".join(path for path, _ in hubs) or "its datasets"
        hint = fetch_hint(*hubs[0]) if hubs else "see eval/README.md for running lm-eval tasks offline"
        raise LangadaptError(
            f"lm_eval task {task.name!r}: could not reach the Hugging Face Hub for {what} "
            f"({' '.join(str(exc).split()) or type(exc).__name__}); {hint}"
        ) from None
    counts = (out or {}).get("n-samples", {})
    return {name: with_stderr(_clean(metrics), (counts.get(name) or {}).get("effective"))
            for name, metrics in (out or {}).get("results", {}).items()}


EXPECTED_NOTICES = (
    "`pretrained` model kwarg is not of type `str`",  # we hand HFLM the model in memory, on purpose
    "Passed an already-initialized model through `pretrained`",  # the same, said a second time
    "Custom kwargs can be passed to `--metadata`",  # a hint for lm-eval's own CLI, once per task
    "Overwriting default num_fewshot",  # the suite's num_fewshot, applied as the suite asks
)
"""lm-eval warnings that describe how langadapt calls it, not a problem with the model or the task."""


class _ExpectedNotices(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not any(notice in record.getMessage() for notice in EXPECTED_NOTICES)


@contextlib.contextmanager
def quiet_harness() -> Iterator[None]:
    """lm-eval's progress bars and its notices about how we call it, off for one call; every other
    warning still shows, and everything is put back afterwards (a library caller's settings too).

    lm-eval draws a bar per task while it builds the requests (no switch: its module's `tqdm` is
    swapped for a disabled one here) and one per request kind, and `datasets`, `transformers` and
    `huggingface_hub` one per split or file: about thirty bars for NorEval, burying the log. lm-eval
    also asks `git describe` in the working directory for its own results file, which langadapt
    does not keep; outside a git checkout git prints "fatal: not a git repository" on the console.
    """
    import datasets
    import huggingface_hub.utils
    import lm_eval.evaluator
    import transformers
    from tqdm import tqdm

    class SilentTqdm(tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **{**kwargs, "disable": True})

    swapped = [(module, "tqdm", SilentTqdm) for name, module in list(sys.modules.items())
               if name.startswith("lm_eval") and getattr(module, "tqdm", None) is tqdm]
    swapped.append((lm_eval.evaluator, "get_git_commit_hash", lambda: None))
    originals = [(module, attr, getattr(module, attr)) for module, attr, _ in swapped]
    switches = [(datasets.utils.logging.is_progress_bar_enabled(), datasets.enable_progress_bars,
                 datasets.disable_progress_bars),
                (transformers.utils.logging.is_progress_bar_enabled(), transformers.utils.logging.enable_progress_bar,
                 transformers.utils.logging.disable_progress_bar),
                (not huggingface_hub.utils.are_progress_bars_disabled(), huggingface_hub.utils.enable_progress_bars,
                 huggingface_hub.utils.disable_progress_bars)]
    harness = logging.getLogger("lm_eval")
    level, notices = harness.level, _ExpectedNotices()
    loggers = [harness, *(logging.getLogger(name) for name in list(logging.root.manager.loggerDict)
                          if name.startswith("lm_eval."))]
    try:
        for module, attr, value in swapped:
            setattr(module, attr, value)
        for _, _, disable in switches:
            disable()
        harness.setLevel(logging.WARNING)  # its INFO lines, where an application logs INFO
        for logger in loggers:
            logger.addFilter(notices)
        yield
    finally:
        for module, attr, value in originals:
            setattr(module, attr, value)
        for was_on, enable, _ in switches:
            if was_on:
                enable()
        harness.setLevel(level)
        for logger in loggers:
            logger.removeFilter(notices)


def _connection_error(exc: BaseException | None) -> bool:
    """A network failure: the builtin kinds, or the HTTP client's transport errors (httpx's
    `TransportError`, which derives from neither), wherever in the chain of causes."""
    while exc is not None:
        kinds = {cls.__name__ for cls in type(exc).__mro__}
        if isinstance(exc, (ConnectionError, TimeoutError)) or "TransportError" in kinds:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


BINOMIAL = ("acc", "acc_norm")
"""lm-eval metrics that are means of 0/1 outcomes, whose standard error is `accuracy_stderr`."""


def with_stderr(metrics: dict, n: int | None) -> dict:
    """`metrics` plus `acc_stderr` (and `acc_norm_stderr`) over `n` scored documents.

    lm-eval computes these as `mean_stderr` only when bootstrapping is on; we run it with
    `bootstrap_iters=0` (its bootstrapped metrics cost minutes), so they are computed here with
    the same formula (`tasks.accuracy_stderr`). A group (no sample count of its own) gets none."""
    from langadapt.evaluation.tasks import accuracy_stderr

    out = dict(metrics)
    for key, value in metrics.items():
        if key.split("/", 1)[0] in BINOMIAL and n and isinstance(value, float) and 0.0 <= value <= 1.0:
            stderr = accuracy_stderr(value, n)
            if stderr is not None:
                out[f"{key}_stderr"] = stderr
    return out


def _clean(metrics: dict) -> dict:
    """`acc,none` -> `acc`; drop stderr placeholders and non-numbers so results.json stays tidy."""
    cleaned = {}
    for key, value in metrics.items():
        metric, _, filt = key.partition(",")
        if "stderr" in metric or not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            continue
        cleaned[metric if filt in ("", "none") else f"{metric}/{filt}"] = value
    return cleaned
