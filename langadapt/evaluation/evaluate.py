"""Run suites on several models and put the numbers side by side, with deltas against a reference.

Models are loaded one at a time and released before the next, so evaluating base, init, stage-1
and adapted checkpoints of a 7B model needs memory for one of them. All data (held-out text,
minimal pairs, lm-eval availability) is prepared before the first model loads, so a bad suite
fails in seconds, not after an hour of scoring.

Results shape (stable; `models` and per-language `bits_per_byte` are read by other tools):

    {"models":  {MODEL: {LANG: {"bits_per_byte", "nll_nats", "bytes", "tokens", "words",
                                "word_perplexity", "tokens_per_second"}}},
     "deltas":  {MODEL: {LANG: {"bits_per_byte": MODEL - reference, "relative": ...}}},
     "tasks":   {"SUITE/TASK": {"kind", "lang", MODEL: {metric: value}}},
     "task_deltas": {"SUITE/TASK": {MODEL: {metric: delta}}},
     "tokenizers": {"used_by": {TOKENIZER: [MODEL, ...]}, "metrics": compare_tokenizers(...)},
     "samples": {MODEL: {LANG: [{"prompt", "text"}]}},
     "translations": {"SUITE/TASK": {"copy_source": {DIRECTION: {"chrf", "bleu"}},
                                     "outputs": {MODEL: {DIRECTION: [{"doc_id", "source", "reference",
                                                                      "hypothesis", "chrf"}]}}}},
     "suites": {SUITE: {"source", "description", "langs", "tasks"}},
     "langs": {LANG: {"documents", "bytes", "source"}},
     "windows": {MODEL: {"window", "stride"}},   the ones used (capped at each model's context length)
     "uniform": {TOKENIZER: {"vocab", "models", "bits_per_byte": {LANG: ...}}},   predicting every token
                equally likely on the same text (`uniform`): the line a step-0 model must beat
     "reference": MODEL, "notes": [str], "meta": {...}}   meta's window/stride: the values used

The evaluate stage adds "target_langs" (its run's `role: target` languages) and "tokens_per_byte"
(its tokenizer stage's held-out tokens per byte, the run's tokenizer and the base's:
`langadapt.evaluation.token_cost`), and `write_report` adds "tradeoff" ({MODEL: target gain and
largest forgetting}, `langadapt.evaluation.tradeoff`). `write_report` also writes each model's
translations (`outputs`) as JSONL files, one per model and direction, and results.json keeps their
paths and a few examples in their place (`report.write_translations`).
"""

from __future__ import annotations

import gc
import hashlib
import logging
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import torch

from langadapt.errors import LangadaptError
from langadapt.evaluation.bpb import bits_per_byte, scoring_window
from langadapt.evaluation.lm_eval_bridge import run_lm_eval
from langadapt.evaluation.preparation import Plan, bpb_langs, plan_suites
from langadapt.evaluation.progress import EvalProgress, Scorer, Unit, headline
from langadapt.evaluation.suite import Suite, TranslationTask
from langadapt.evaluation.tables import STDERR, flatten
from langadapt.evaluation.tasks import generate_samples, minimal_pairs_accuracy
from langadapt.evaluation.translation import copy_source_scores, translation_scores
from langadapt.evaluation.uniform import uniform_reference
from langadapt.inputs.model_folder import is_model_folder
from langadapt.recipe.evaluation import EvaluationConfig

log = logging.getLogger("langadapt")

RUN_MODELS = ("init", "init_random", "stage1", "adapted")
"""Model names a run directory contributes (besides `base`)."""
COUNTS = {"pairs", "sample_len"}
"""Task outputs that are sizes, not metrics: no deltas for them."""

ModelSpec = Path | str | tuple[Any, Any] | Callable[[], tuple[Any, Any]]
"""An HF folder (model + tokenizer), an in-memory (model, tokenizer), or a callable building one."""


def resolve_device(config: EvaluationConfig) -> torch.device:
    """The configured device, or cuda when available."""
    return torch.device(config.device or ("cuda" if torch.cuda.is_available() else "cpu"))


def resolve_dtype(config: EvaluationConfig, device: torch.device) -> torch.dtype:
    """The configured dtype; auto = bfloat16 on GPU (memory), float32 on CPU (bf16 matmuls are slow there)."""
    name = config.dtype if config.dtype != "auto" else ("bfloat16" if device.type == "cuda" else "float32")
    return getattr(torch, name)


def load_model(spec: ModelSpec, config: EvaluationConfig) -> tuple[Any, Any]:
    """(model, tokenizer) in eval mode; folders are loaded onto the configured device and dtype."""
    if isinstance(spec, tuple):
        return spec
    if callable(spec):
        return spec()
    from transformers import AutoModelForCausalLM

    from langadapt.tokenizer.loading import load_tokenizer

    path, device = Path(spec), resolve_device(config)
    if not is_model_folder(path):
        raise LangadaptError(f"{path}: not a Hugging Face model folder (no config.json)")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=resolve_dtype(config, device)).to(device).eval()
    return model, load_tokenizer(path, what="model")


def _tokenizer_id(tokenizer: Any) -> str:
    """A fingerprint of a tokenizer's vocabulary and rules (to score each distinct one once)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    blob = backend.to_str() if backend is not None else repr(sorted(tokenizer.get_vocab().items()))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _tokenizer_name(first_user: str, index: int) -> str:
    """`base` for the base model's tokenizer, `new` for a run's own, else the model's name."""
    if first_user == "base":
        return "base"
    return "new" if first_user in RUN_MODELS and index <= 1 else first_user


def score_units(plan: Plan, config: EvaluationConfig, results: dict, name: str) -> list[Unit]:
    """Every task of the plan on model `name`, in the order they run, as `progress.Unit`s: each
    writes its numbers into `results` and returns its headline for the progress line.

    bpb is one unit per language (a 7B model takes minutes per language), the other kinds one
    unit per task; generated samples are one unit for all prompts (one batch)."""
    units = [Unit("bpb", lang, _bpb_unit(lang, texts, config, results, name))
             for lang, texts in plan.texts.items() if lang in bpb_langs(plan)]
    for key, (pairs_task, pairs) in plan.pairs.items():
        results["tasks"].setdefault(key, {"kind": "minimal_pairs", "lang": pairs_task.lang})
        units.append(Unit(key, pairs_task.lang, _task_unit(
            "minimal_pairs", results["tasks"][key], name,
            lambda model, tok, pairs=pairs: minimal_pairs_accuracy(model, tok, pairs, config))))
    for key, (lm_task, manager) in plan.lm_eval.items():
        results["tasks"].setdefault(key, {"kind": "lm_eval"})
        units.append(Unit(key, ", ".join(lm_task.tasks), _task_unit(
            "lm_eval", results["tasks"][key], name,
            lambda model, tok, lm_task=lm_task, manager=manager: run_lm_eval(model, tok, lm_task, config, manager))))
    for key, (tr_task, rows) in plan.translation.items():
        if tr_task.models is not None and name not in tr_task.models:
            continue  # generation for a model the task does not compare (`TranslationTask.models`)
        results["tasks"].setdefault(key, {"kind": "translation"})
        if key not in results["translations"]:
            results["translations"][key] = {"copy_source": copy_source_scores(tr_task, rows), "outputs": {}}
        units.append(Unit(key, ", ".join(tr_task.directions), _translation_unit(
            tr_task, rows, config, results, key, name)))
    if plan.prompts:
        units.append(Unit("samples", ", ".join(plan.prompts), _task_unit(
            "samples", results["samples"], name,
            lambda model, tok: generate_samples(model, tok, plan.prompts, config.generate))))
    return units


def translation_model_notes(plan: Plan, models: list[str]) -> list[str]:
    """A note per translation task whose `models` names a model this evaluation does not score (a
    run without stage 1, `langadapt eval` on folders named otherwise): the task still runs on the
    listed models it has, and says which it could not find, so a typo is seen, not silently empty."""
    notes = []
    for key, (task, _) in plan.translation.items():
        if task.models is None:
            continue
        absent = [name for name in task.models if name not in models]
        if absent:
            ran = [name for name in task.models if name in models]
            notes.append(f"{key}: models {', '.join(absent)} not among the models scored ({', '.join(models)}); "
                         f"translated by {', '.join(ran) or 'none'}")
    return notes


def _bpb_unit(lang: str, texts: list[str], config: EvaluationConfig, results: dict, name: str) -> Scorer:
    """Held-out bits per byte of one language, stored under results["models"][name][lang]."""

    def score(model: Any, tok: Any) -> str:
        result = bits_per_byte(model, tok, texts, config.window, config.effective_stride, config.batch_size)
        results["models"][name][lang] = result
        return headline("bpb", result)

    return score


def _translation_unit(task: TranslationTask, rows: list[dict[str, str]], config: EvaluationConfig,
                      results: dict, key: str, name: str) -> Scorer:
    """A translation task on one model: scores under results["tasks"][key][name], the model's
    translations under results["translations"][key]["outputs"][name] (`report` writes them out)."""

    def score(model: Any, tok: Any) -> str:
        scores, outputs = translation_scores(model, tok, task, rows, config.batch_size)
        results["tasks"][key][name] = scores
        results["translations"][key]["outputs"][name] = outputs
        return headline("translation", scores)

    return score


def _task_unit(kind: str, into: dict, name: str, run: Scorer) -> Scorer:
    """A unit that stores `run`'s result as `into[name]` and says its headline."""

    def score(model: Any, tok: Any) -> str:
        into[name] = run(model, tok)
        return headline(kind, into[name])

    return score


def _window_used(model: Any, config: EvaluationConfig, name: str) -> dict[str, int]:
    """The window and stride `model` is scored with; a log line when its context length capped the window."""
    window, stride = scoring_window(model, config.window, config.effective_stride)
    if window < config.window:
        log.warning("evaluation: %s scored with a %d-token window, its context length (evaluation.window "
                    "asks %d); the report states %d", name, window, config.window, window)
    return {"window": window, "stride": stride}


def _stated(windows: dict[str, dict[str, int]], key: str, asked: int) -> int | str:
    """The window (or stride) the report states: the value used, one number when every model used it."""
    used = {w[key] for w in windows.values()}
    if not used:
        return asked
    if len(used) == 1:
        return used.pop()
    return ", ".join(f"{w[key]} ({name})" for name, w in windows.items())


def evaluate_models(
    models: dict[str, ModelSpec],
    suites: list[Suite],
    texts_by_lang: dict[str, list[str]],
    config: EvaluationConfig,
    reference: str | None = None,
    given: dict[str, str] | None = None,
    missing_note: str = "in the run's data; skipped",
) -> dict:
    """Run `suites` on every model (one in memory at a time); see the module docstring for the shape.

    Deltas are against `reference` (default: `base` when present, else the first model). `given`
    and `missing_note` are `plan.plan_suites`'s: the languages whose text the user gave files for,
    and what the note on languages without text says."""
    if not models:
        raise LangadaptError("evaluation: no models to evaluate")
    reference = reference or ("base" if "base" in models else next(iter(models)))
    if reference not in models:
        raise LangadaptError(f"evaluation: reference model {reference!r} is not among {', '.join(models)}")
    planning = time.perf_counter()
    plan = plan_suites(suites, texts_by_lang, config, given, missing_note)
    plan.notes.extend(translation_model_notes(plan, list(models)))
    log.info("evaluate: suites' data read and checked in %.1f s", time.perf_counter() - planning)
    results: dict[str, Any] = {
        "models": {},
        "deltas": {},
        "tasks": {},
        "task_deltas": {},
        "tokenizers": {},
        "samples": {},
        "translations": {},
        "windows": {},
        "notes": plan.notes,
    }
    started = time.perf_counter()
    tokenizers, used_by = _score_models(models, plan, config, results)
    results["tokenizers"] = {"used_by": used_by, "metrics": _tokenizer_metrics(tokenizers, plan)}
    results["uniform"] = uniform_reference(results["models"], tokenizers.values(), used_by)
    results["reference"] = reference
    results["deltas"] = _deltas(results["models"], reference)
    results["task_deltas"] = _task_deltas(results["tasks"], reference)
    results["suites"] = plan.suites
    results["langs"] = {
        lang: {
            "documents": len(t),
            "bytes": sum(len(x.encode("utf-8")) for x in t),
            "source": plan.sources[lang],
            **({"documents_given": plan.given_sizes[lang][0], "bytes_given": plan.given_sizes[lang][1]}
               if lang in plan.given_sizes else {}),
        }
        for lang, t in plan.texts.items()
    }
    results["meta"] = {
        "window": _stated(results["windows"], "window", config.window),
        "stride": _stated(results["windows"], "stride", config.effective_stride),
        "window_requested": config.window,
        "batch_size": config.batch_size or "auto",
        "max_bytes_per_lang": config.max_bytes_per_lang,
        "seconds": time.perf_counter() - started,
        "langadapt": version("langadapt"),  # pyproject's, as `langadapt.__version__` reads it
        "torch": torch.__version__,
    }
    return results


def _score_models(
    models: dict[str, ModelSpec], plan: Plan, config: EvaluationConfig, results: dict
) -> tuple[dict[str, tuple[str, Any]], dict[str, list[str]]]:
    """Load each model in turn, score its units with progress (`progress`), release it; returns
    the distinct tokenizers (fingerprint -> (name, tokenizer)) and which models use each."""
    tokenizers: dict[str, tuple[str, Any]] = {}
    used_by: dict[str, list[str]] = {}
    units = {name: score_units(plan, config, results, name) for name in models}
    with EvalProgress(list(models), {name: len(own) for name, own in units.items()}) as progress:
        for index, (name, spec) in enumerate(models.items()):
            model, tok = progress.model(index, name, lambda spec=spec: load_model(spec, config))
            results["windows"][name] = _window_used(model, config, name)
            results["models"][name] = {}
            for position, unit in enumerate(units[name]):
                progress.unit(index, name, position, unit, model, tok)
            fingerprint = _tokenizer_id(tok)
            tokenizers.setdefault(fingerprint, (_tokenizer_name(name, len(tokenizers)), tok))
            used_by.setdefault(tokenizers[fingerprint][0], []).append(name)
            del model
            gc.collect()
    return tokenizers, used_by


def _tokenizer_metrics(tokenizers: dict[str, tuple[str, Any]], plan: Plan) -> dict | None:
    """compare_tokenizers over each distinct tokenizer, or None (with a note) when unavailable."""
    if not plan.tokenizer_langs:
        return None
    try:
        from langadapt.tokenizer.metrics import compare_tokenizers
    except ImportError as exc:
        plan.notes.append(f"tokenizer_metrics: langadapt.tokenizer.metrics not importable ({exc}); skipped")
        return None
    texts = {lang: plan.texts[lang] for lang in plan.tokenizer_langs if lang in plan.texts}  # the rest: a plan note
    return compare_tokenizers({name: tok for name, tok in tokenizers.values()}, texts) if texts else None


def _deltas(models: dict[str, dict], reference: str) -> dict:
    """Per model and language: bpb minus the reference's (negative = better than the reference)."""
    ref = models.get(reference, {})
    return {
        name: {
            lang: {
                "bits_per_byte": m["bits_per_byte"] - ref[lang]["bits_per_byte"],
                "relative": m["bits_per_byte"] / ref[lang]["bits_per_byte"] - 1,
            }
            for lang, m in per_lang.items()
            if lang in ref
        }
        for name, per_lang in models.items()
        if name != reference
    }


def _task_deltas(tasks: dict[str, dict], reference: str) -> dict:
    """Per task and model: each numeric metric minus the reference model's."""
    out: dict[str, dict] = {}
    for key, per_model in tasks.items():
        ref = per_model.get(reference)
        if not isinstance(ref, dict):
            continue
        for name, metrics in per_model.items():
            if name in (reference, "kind", "lang") or not isinstance(metrics, dict):
                continue
            flat_ref, flat = flatten(ref), flatten(metrics)
            out.setdefault(key, {})[name] = {
                k: v - flat_ref[k]
                for k, v in flat.items()
                if k in flat_ref and k.rsplit("/", 1)[-1] not in COUNTS and not k.endswith(STDERR)
            }
    return out
