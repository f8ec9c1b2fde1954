"""The `evaluate` pipeline stage and `langadapt eval`: find the models, run the suites, write the report.

A run contributes, in this order:

    base         the source model (ctx.base_model; absent for `init: scratch`)
    init         the embeddings stage's model: the warm model at step 0 (new tokenizer, initialised rows)
    init_random  the same warm model with the rows `model.resize_token_embeddings(len(tokenizer))`
                 gives (`embeddings.method: transformers_resize`), built in memory: what a user
                 gets without this tool, the fair baseline for an initialisation (a cold model is not)
    stage1       after training embeddings + head (when stage 1 is enabled)
    adapted      the stage 2 model: the final one
    cold         with `cold_baseline`: the same recipe trained from scratch at equal compute
                 (the pipeline trains it in its own run directory, `langadapt.evaluation.cold_twin`)

Inside the pipeline the models are the ones the recipe's enabled stages made (`ctx.models`);
`langadapt eval RUN` looks at what the run directory holds (`RunLayout.models_on_disk`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from langadapt.errors import LangadaptError
from langadapt.evaluation.evaluate import ModelSpec, evaluate_models, load_model
from langadapt.evaluation.held_out import (
    EvalTarget,
    GivenTexts,
    eval_target,
    held_out_texts,
    recipe_scoring,
    recipe_target_langs,
)
from langadapt.evaluation.naming import split_named, unique_names
from langadapt.evaluation.preparation import RUN_DATA
from langadapt.evaluation.report import write_report
from langadapt.evaluation.stage_inputs import EvaluateSlice, compare_folder
from langadapt.evaluation.suite import load_suites
from langadapt.evaluation.token_cost import token_costs
from langadapt.evaluation.training_report import planned_energy, trained_runs
from langadapt.inputs.model_folder import is_model_folder
from langadapt.recipe.evaluation import EvaluationConfig
from langadapt.run.context import StageContext
from langadapt.run.layout import MODEL_STAGES, RunLayout, read_manifest
from langadapt.run.trackers import log_evaluation
from langadapt.tokenizer.summary import vocabulary_shortfall

log = logging.getLogger(__name__)


def random_init_model(base: Path, init: Path, config: EvaluationConfig, seed: int):
    """A builder for `init_random`: the base model moved to the new tokenizer as transformers' resize
    would (`transformers_resize`, its head rows drawn from the head's own rows, as transformers does)."""

    def build() -> tuple[Any, Any]:
        from langadapt.embeddings import EmbeddingConfig, transfer_embeddings
        from langadapt.tokenizer.loading import load_tokenizer

        model, old_tokenizer = load_model(base, config)
        new_tokenizer = load_tokenizer(init, what="initialised model")
        dtype = next(model.parameters()).dtype
        # Surgery in float32 (the mean/covariance of the source rows), then back to the eval dtype.
        baseline = EmbeddingConfig(method="transformers_resize", head_init="same")
        model, _ = transfer_embeddings(model.float(), old_tokenizer, new_tokenizer, baseline, seed=seed)
        return model.to(dtype).eval(), new_tokenizer

    return build


def models_to_score(
    own: dict[str, Path], base_model: str | None, config: EvaluationConfig, seed: int
) -> dict[str, ModelSpec]:
    """The base model, then the run's models (init, stage1, adapted), with init_random after init."""
    models: dict[str, ModelSpec] = {}
    base = Path(base_model) if base_model else None
    if base is not None and is_model_folder(base):
        models["base"] = base
    for name, path in own.items():
        if not is_model_folder(path):
            raise LangadaptError(f"evaluate: model {name} missing at {path}; its stage did not complete")
        models[name] = path
        if name == "init" and config.random_baseline and base is not None and "base" in models:
            models["init_random"] = random_init_model(base, path, config, seed)
    return models


def compare_models(entries: list[str], taken: set[str] = frozenset()) -> dict[str, ModelSpec]:
    """Extra models, each `PATH` or `NAME=PATH`: an HF folder as itself, a run directory as its
    final (or latest) model; named as `naming.unique_names` says, never clashing with `taken`."""
    names, paths = [], []
    for entry in entries:
        name, path = split_named(entry)
        names.append(name)
        paths.append(_model_of(Path(path), entry))
    return dict(zip(unique_names(paths, names, set(taken)), paths))


def _model_of(path: Path, entry: str) -> Path:
    if (found := compare_folder(path)) is None:
        raise LangadaptError(f"compare: {entry}: neither a Hugging Face model folder nor a run directory with models")
    return found


def target_langs(layout: RunLayout) -> list[str]:
    """The languages of the run's `role: target` sources, as its data stage recorded them: the
    report's gain side (`tradeoff`); everything else scored is the forgetting side."""
    sources = layout.stage_summary("data").get("sources") or {}
    return sorted({s["lang"] for s in sources.values() if isinstance(s, dict) and s.get("role") == "target"})


def _summary(results: dict) -> dict:
    return {
        "bits_per_byte": {
            name: {lang: round(m["bits_per_byte"], 4) for lang, m in per.items()}
            for name, per in results["models"].items()
        },
        "reference": results.get("reference"),
        "notes": results.get("notes", []),
    }


def run(slice_: EvaluateSlice, ctx: StageContext) -> dict[str, Any]:
    """Evaluate every model of the run (+ the runs it depends on, `ctx.needed`: the cold twin,
    + `config.compare`) and write results.json, report.md, report.html."""
    config = slice_.config
    if not config.suites:
        ctx.log.info("evaluate: no suites configured; nothing to do")
        return {"bits_per_byte": {}, "notes": ["no suites configured"]}
    suites = load_suites(config.suites)
    own = ctx.own_models()
    models = models_to_score(own, ctx.base_model, config, ctx.seed)
    models.update(ctx.needed)
    models.update(compare_models(config.compare, set(models)))
    if not models:
        raise LangadaptError(f"evaluate: no models to evaluate in {ctx.run_dir}")
    ctx.log.info("evaluate: %s on %s", ", ".join(models), ", ".join(s.name for s in suites))
    results = evaluate_models(models, suites, held_out_texts(ctx.run_dir), config)
    results["target_langs"] = target_langs(ctx.layout)
    name_held_out_run(results, ctx.run_dir)
    add_tokenizer_facts(results, ctx.layout)
    write_report(results, ctx.out, trained_runs(models), title=f"langadapt evaluation: {ctx.run_dir.name}",
                 planned_energy=planned_energy(ctx.layout))
    log_evaluation(ctx.layout, results, ctx.out)  # into the trackers the training stages opened
    return _summary(results)


def name_held_out_run(results: dict[str, Any], run_dir: Path | None) -> None:
    """results["held_out_run"]: the run directory whose data stage's valid split was scored, when
    any language was (not those given as files). `langadapt eval` takes it from the model's run, a
    run an export names, or the first `--compare` run, so the report must say which."""
    if run_dir is not None and any(info.get("source") == RUN_DATA for info in results.get("langs", {}).values()):
        results["held_out_run"] = str(run_dir)


def add_tokenizer_facts(results: dict[str, Any], layout: RunLayout) -> None:
    """What the run's tokenizer stage made and measured, for the report and results.json: its
    `tokenizer.kind` (the road: keep_base, extend or a new tokenizer), tokens per byte (the run's
    tokenizer and the base's) and, when the vocabulary stopped short of vocab_size, the
    line that says so (as the console, `plan` and the card say it)."""
    results["tokens_per_byte"] = token_costs(layout)
    if kind := layout.stage_summary("tokenizer").get("kind") or layout.recipe().get("tokenizer", {}).get("kind"):
        results.setdefault("tokenizers", {})["kind"] = kind  # the report names the road near its top
    if shortfall := vocabulary_shortfall(layout.stage_summary("tokenizer")):
        results.setdefault("tokenizers", {})["shortfall"] = shortfall


def _run_base_and_seed(run_dir: Path) -> tuple[str | None, int]:
    """The base model and seed of a finished run, from its manifests or resolved recipe."""
    layout = RunLayout(run_dir)
    tree = layout.recipe()
    seed = int(tree.get("seed", 0))
    base = (tree.get("base_model") or {}).get("path") if tree.get("init") == "warm" else None
    for stage in MODEL_STAGES.values():
        if layout.manifest(stage).is_file():
            base = read_manifest(layout.stage_dir(stage)).get("base_model") or base
            break
    return base, seed


def evaluate_cli(
    model_or_run: str,
    suites: list[str],
    out: Path,
    compare: list[str],
    config: EvaluationConfig | None = None,
    name: str | None = None,
    texts: GivenTexts | None = None,
    target: EvalTarget | None = None,
    scoring: dict[str, Any] | None = None,
) -> dict:
    """`langadapt eval`: a run directory's models, or one HF folder (the adapted model, called
    `name` or as `naming` derives it), plus `compare` (the references); report into `out`.

    Deltas are taken against the first `compare` model, else the run's base model. Held-out text
    is `texts` (`--texts`) where given, else the data stage's of the run the model came from
    (`held_out.run_of`: the run directory itself, the one a model folder lies in or its exported
    recipe names), else of the first `compare` run. The scoring settings are that recipe's unless
    `config` is given, so the numbers are the evaluate stage's (`held_out.recipe_scoring`).
    `target` is `held_out.eval_target` of the same arguments where the caller (the CLI, before
    torch loaded) has found and checked it already. `scoring`: settings that replace the recipe's
    (`--max-bytes`: {"max_bytes_per_lang": N or None}).
    """
    loaded = load_suites(suites)
    given = texts or GivenTexts({}, {})
    target = target or eval_target(model_or_run, compare, name, loaded, given)
    config = (config or recipe_scoring(target.tree)).model_copy(
        update={**(scoring or {}), "suites": suites, "compare": compare})
    if is_model_folder(target.path):
        models: dict[str, ModelSpec] = {unique_names([target.path], [name])[0]: target.path}
    else:
        base, seed = _run_base_and_seed(target.path)
        models = models_to_score(RunLayout(target.path).models_on_disk(), base, config, seed)
    references = compare_models(compare, set(models))
    models.update(references)
    results = evaluate_models(models, loaded, target.texts, config,
                              reference=next(iter(references), None), given=given.sources,
                              missing_note=_missing_note(target.path, target.origin, target.data_dir, target.tree))
    results["model_paths"] = {key: str(spec) for key, spec in models.items() if isinstance(spec, Path)}
    name_held_out_run(results, target.data_dir)
    results["target_langs"] = (target_langs(RunLayout(target.data_dir)) if target.data_dir is not None
                               else recipe_target_langs(target.tree))
    if target.origin is not None:
        add_tokenizer_facts(results, RunLayout(target.origin))
    elif kind := (target.tree.get("tokenizer") or {}).get("kind"):  # an export away from its run: its recipe
        results.setdefault("tokenizers", {})["kind"] = kind
    write_report(results, out, trained_runs(models), title=f"langadapt evaluation: {next(iter(models))}",
                 planned_energy=planned_energy(RunLayout(target.origin)) if target.origin is not None else None)
    return results


def _missing_note(target: Path, origin: Path | None, data_dir: Path | None, tree: dict[str, Any]) -> str:
    """The end of the one note on languages without held-out text: where it was looked for, what to pass."""
    hint = "pass --texts LANG=FILE (repeatable) to score them"
    if data_dir is not None:
        return f"in the run's data; skipped: {hint}"
    if origin is not None:
        return f"here: {origin} has no held-out split (its data stage did not run or was removed); skipped: {hint}"
    if is_model_folder(target) and tree.get("name"):
        return (f"here: {target} was exported by run {tree['name']} (run_root {tree.get('run_root')}), which is "
                f"not in this working directory; skipped: {hint}")
    return f"here ({target} carries no held-out data of its own); skipped: {hint}"
