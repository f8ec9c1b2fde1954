"""lm-evaluation-harness tasks on an in-memory model, through its Python API.

lm-eval is an optional extra (`pip install 'langadapt[eval]'`): it pulls in a large dependency
tree that the core toolkit does not need. `require_lm_eval` is called while planning, so a suite
that asks for lm-eval tasks fails before the first model is loaded, with the install hint.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from langadapt.errors import LangadaptError
from langadapt.evaluation.bpb import default_batch_size, model_device
from langadapt.evaluation.config import EvaluationConfig
from langadapt.evaluation.suite import LmEvalTask

INSTALL_HINT = "pip install 'langadapt[eval]'"


def require_lm_eval(where: str) -> None:
    """Raise a one-line error with the install hint when lm-eval cannot be imported."""
    try:
        import lm_eval  # noqa: F401
        from lm_eval.models.huggingface import HFLM  # noqa: F401
    except ImportError:
        raise LangadaptError(
            f"{where}: lm-eval tasks need lm-evaluation-harness, which is not installed; run: {INSTALL_HINT}"
        ) from None


def run_lm_eval(model: Any, tokenizer: Any, task: LmEvalTask, config: EvaluationConfig) -> dict[str, dict]:
    """{lm-eval task name: {metric: value}} for `task.tasks` on this model.

    The model is wrapped as `HFLM(pretrained=model, tokenizer=tokenizer)`, so the weights already
    in memory are evaluated (no reload, no Hub access for the model). `max_length` is our scoring
    window, so lm-eval's rolling-loglikelihood tasks use the same windows as our bpb.
    """
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    logging.getLogger("lm-eval").setLevel(logging.WARNING)
    batch_size = config.batch_size or default_batch_size(model_device(model))
    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, max_length=config.window)
    manager = TaskManager(include_path=task.include_path, include_defaults=task.include_defaults)
    limit = int(task.limit) if task.limit is not None and task.limit >= 1 else task.limit
    try:
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
    return {name: _clean(metrics) for name, metrics in (out or {}).get("results", {}).items()}


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
