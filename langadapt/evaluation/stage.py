"""The `evaluate` pipeline stage and `langadapt eval`: find the models, run the suites, write the report.

A run directory contributes, in this order and only where they exist:

    base         the source model (ctx.base_model; absent for `init: scratch`)
    init         embeddings/model: the warm model at step 0 (new tokenizer, initialised rows)
    init_random  the same warm model with the new rows drawn by the `random` method, built in
                 memory: the fair baseline for judging an initialisation (see DESIGN.md)
    stage1       stage1/model: after training embeddings + head
    adapted      stage2/model: the final model
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from langadapt.context import StageContext
from langadapt.data.documents import texts_by_lang
from langadapt.errors import LangadaptError
from langadapt.evaluation.config import EvaluationConfig
from langadapt.evaluation.evaluate import ModelSpec, evaluate_models, load_model
from langadapt.evaluation.report import write_report
from langadapt.evaluation.suite import load_suites

RUN_FOLDERS = {"init": "embeddings", "stage1": "stage1", "adapted": "stage2"}
"""Model name -> the stage folder whose `model/` holds it."""


def _is_model(path: Path) -> bool:
    return (path / "config.json").is_file()


def random_init_model(base: Path, init: Path, config: EvaluationConfig, seed: int):
    """A builder for `init_random`: the base model moved to the new tokenizer with `random` rows."""

    def build() -> tuple[Any, Any]:
        from transformers import AutoTokenizer

        from langadapt.embeddings import EmbeddingConfig, transfer_embeddings

        model, old_tokenizer = load_model(base, config)
        new_tokenizer = AutoTokenizer.from_pretrained(init)
        dtype = next(model.parameters()).dtype
        # Surgery in float32 (the mean/covariance of the source rows), then back to the eval dtype.
        model, _ = transfer_embeddings(
            model.float(), old_tokenizer, new_tokenizer, EmbeddingConfig(method="random"), seed=seed
        )
        return model.to(dtype).eval(), new_tokenizer

    return build


def run_models(
    run_dir: Path, base_model: str | None, config: EvaluationConfig, seed: int
) -> dict[str, ModelSpec]:
    """The models of a run directory that exist, in pipeline order (see the module docstring)."""
    models: dict[str, ModelSpec] = {}
    base = Path(base_model) if base_model else None
    if base is not None and _is_model(base):
        models["base"] = base
    init = run_dir / RUN_FOLDERS["init"] / "model"
    if _is_model(init):
        models["init"] = init
        if config.random_baseline and "base" in models:
            models["init_random"] = random_init_model(base, init, config, seed)
    for name in ("stage1", "adapted"):
        path = run_dir / RUN_FOLDERS[name] / "model"
        if _is_model(path):
            models[name] = path
    return models


def compare_models(entries: list[str], config: EvaluationConfig) -> dict[str, ModelSpec]:
    """Extra models: an HF folder as itself, a run directory as its final (or latest) model."""
    models: dict[str, ModelSpec] = {}
    for entry in entries:
        path = Path(entry)
        if _is_model(path):
            models[path.name] = path
            continue
        found = [
            m for m in run_models(path, None, config.model_copy(update={"random_baseline": False}), 0).items()
        ]
        if not found:
            raise LangadaptError(
                f"compare: {entry}: neither a Hugging Face model folder nor a run directory with models"
            )
        name, spec = found[-1]
        models[f"{path.name}:{name}"] = spec
    return models


def held_out_texts(run_dir: Path | None) -> dict[str, list[str]]:
    """The run's held-out documents by language, or {} when there is no data stage output."""
    if run_dir is None or not (run_dir / "data" / "valid").is_dir():
        return {}
    return texts_by_lang(run_dir / "data", "valid")


def _summary(results: dict) -> dict:
    return {
        "bits_per_byte": {
            name: {lang: round(m["bits_per_byte"], 4) for lang, m in per.items()}
            for name, per in results["models"].items()
        },
        "reference": results.get("reference"),
        "notes": results.get("notes", []),
    }


def run(config: EvaluationConfig, ctx: StageContext) -> dict:
    """Evaluate every model of the run (+ `config.compare`) and write results.json, report.md, report.html."""
    if not config.suites:
        ctx.log.info("evaluate: no suites configured; nothing to do")
        return {"bits_per_byte": {}, "notes": ["no suites configured"]}
    suites = load_suites(config.suites)
    models = run_models(ctx.run_dir, ctx.base_model, config, ctx.seed)
    models.update(compare_models(config.compare, config))
    if not models:
        raise LangadaptError(
            f"evaluate: no model folders found in {ctx.run_dir} (embeddings/, stage1/, stage2/)"
        )
    ctx.log.info("evaluate: %s on %s", ", ".join(models), ", ".join(s.name for s in suites))
    results = evaluate_models(models, suites, held_out_texts(ctx.run_dir), config)
    write_report(results, ctx.out, run_dir=ctx.run_dir, title=f"langadapt evaluation: {ctx.run_dir.name}")
    return _summary(results)


def _run_base_and_seed(run_dir: Path) -> tuple[str | None, int]:
    """The base model and seed of a finished run, from its manifests or resolved recipe."""
    seed, base = 0, None
    recipe = run_dir / "recipe.resolved.yaml"
    if recipe.is_file():
        tree = yaml.safe_load(recipe.read_text(encoding="utf-8")) or {}
        seed = int(tree.get("seed", 0))
        base = (tree.get("base_model") or {}).get("path") if tree.get("init", "warm") == "warm" else None
    for stage in ("embeddings", "stage1", "stage2", "evaluate"):
        manifest = run_dir / stage / "manifest.json"
        if manifest.is_file():
            base = json.loads(manifest.read_text(encoding="utf-8")).get("base_model") or base
            break
    return base, seed


def evaluate_cli(
    model_or_run: str,
    suites: list[str],
    out: Path,
    compare: list[str],
    config: EvaluationConfig | None = None,
) -> dict:
    """`langadapt eval`: a run directory's models, or one HF folder, plus `compare`; report into `out`.

    Held-out text comes from the first run directory among the arguments (its data stage);
    an HF folder on its own can only run suites whose tasks name explicit files.
    """
    config = (config or EvaluationConfig()).model_copy(update={"suites": suites, "compare": compare})
    target = Path(model_or_run)
    if not target.exists():
        raise LangadaptError(f"{model_or_run}: no such run directory or model folder")
    if _is_model(target):
        models: dict[str, ModelSpec] = {target.name: target}
        run_dir = None
    else:
        base, seed = _run_base_and_seed(target)
        models, run_dir = run_models(target, base, config, seed), target
        if not models:
            raise LangadaptError(
                f"{model_or_run}: neither a Hugging Face model folder nor a run directory with models"
            )
    models.update(compare_models(compare, config))
    data_dir = run_dir or next((Path(c) for c in compare if (Path(c) / "data" / "valid").is_dir()), None)
    results = evaluate_models(models, load_suites(suites), held_out_texts(data_dir), config)
    write_report(results, out, run_dir=run_dir, title=f"langadapt evaluation: {target.name}")
    return results
