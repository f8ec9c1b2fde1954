"""Evaluation: suites of held-out bits-per-byte, tokenizer metrics, minimal pairs, lm-eval tasks
and samples, run on the base, initialised, stage-1 and adapted models, reported side by side.

    bits_per_byte(model, tokenizer, texts, window, stride, batch_size)   as lm-eval defines it
    load_suite(path)                                                     a validated suite YAML
    evaluate_models(models, suites, texts_by_lang, config)               the results dict
    evaluate_cli(model_or_run, suites, out, compare, name)               `langadapt eval`
    EvaluationConfig                                                     the recipe slice
    run(slice_, ctx)                                                     the pipeline stage

Imported lazily so that loading a recipe (which needs only EvaluationConfig) stays light.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from langadapt.recipe.evaluation import EvaluationConfig

_EXPORTS = {
    "bits_per_byte": "bpb",
    "load_suite": "suite",
    "load_suites": "suite",
    "evaluate_models": "evaluate",
    "write_report": "report",
    "evaluate_cli": "stage",
    "run": "stage",
}
__all__ = [
    "EvaluationConfig",
    "bits_per_byte",
    "evaluate_cli",
    "evaluate_models",
    "load_suite",
    "load_suites",
    "run",
    "write_report",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'langadapt.evaluation' has no attribute {name!r}")
    return getattr(import_module(f"langadapt.evaluation.{_EXPORTS[name]}"), name)
