"""Export: a trained model of the run as a plain Hugging Face folder with its card, checked, and
optionally pushed.

`export_model` is the one path for the export stage (the run's last trained model) and for
`langadapt export --checkpoint STAGE/STEP` (an intermediate checkpoint): write the folder, reload
it with plain transformers and compare its logits with the run's model, generate from a prompt in
the target language, write the card. A failed check raises before the stage is marked complete
and before any push. An exported folder is a thing people edit (the card above all): the
manifest records a hash of every file, and a re-export that would replace a changed file stops
unless the user passed `--overwrite`.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from huggingface_hub.constants import REPOCARD_NAME

from langadapt.errors import LangadaptError
from langadapt.export.card import Exported, build_card, trained_tokens
from langadapt.export.folder import write_model_folder
from langadapt.export.provenance import ExportSlice, RunFacts, check_licence, publishable_recipe
from langadapt.export.trained import completed_training_stages, parse_checkpoint, require_trained
from langadapt.export.verify import default_prompt, probe, verify_folder
from langadapt.recipe.export import RECIPE_FILE, ExportConfig
from langadapt.run.completion import is_complete
from langadapt.run.contenthash import HashCache
from langadapt.run.context import StageContext
from langadapt.run.layout import MODEL_STAGES, TRAINING_STAGES, ExportPaths, RunLayout, read_manifest

log = logging.getLogger("langadapt")


def file_hashes(folder: Path) -> dict[str, str]:
    return HashCache(None).hash_paths([folder], relative_to=folder)


def check_replaceable(ctx: StageContext) -> None:
    """Refuse to replace an exported folder whose files differ from what the last export wrote."""
    final = ctx.layout.final()
    folder = final.export.model
    if ctx.overwrite or not folder.exists():
        return
    recorded = final.stage_summary(ctx.stage).get("files")
    current = file_hashes(folder)
    if recorded is None:
        raise LangadaptError(f"{folder}: exists and was not written by this run's export; "
                             "pass --overwrite to replace it")
    changed = sorted(name for name in set(current) | set(recorded) if current.get(name) != recorded.get(name))
    if changed:
        raise LangadaptError(f"{folder}: {', '.join(changed[:3])} changed since it was exported "
                             "(edited by hand?); pass --overwrite to replace it")


@contextlib.contextmanager
def checkpoint_folder(layout: RunLayout, checkpoint: Path) -> Iterator[Path]:
    """A training checkpoint as a temporary model folder (the run's config and tokenizer beside its
    weights), so that a checkpoint is exported and checked exactly like a final model."""
    from langadapt.train.checkpoint import checkpoint_model

    with tempfile.TemporaryDirectory(prefix=".checkpoint-", dir=layout.root) as tmp:
        yield checkpoint_model(checkpoint, layout.embeddings.model, Path(tmp))


def export_model(paths: ExportPaths, layout: RunLayout, config: ExportConfig, facts: RunFacts, name: str,
                 stages: tuple[str, ...], source: Path, base_model: str | None) -> dict[str, Any]:
    """Write, check and describe one exported folder from `source`, a model folder of the run (its
    tokenizer beside it); returns the export's summary."""
    from transformers import AutoModelForCausalLM

    languages = list(config.languages or facts.target_languages)
    prompt = default_prompt(config.prompt, languages)  # the cheap checks first, before any loading
    check_licence(config, facts, {stage: trained_tokens(layout, stage) for stage in stages})
    folder = paths.model
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).eval()
    reference = probe(model, source, prompt)
    written = write_model_folder(model, source, base_model, folder, config.dtype, config.max_shard_size)
    del model
    gc.collect()  # one model in memory at a time: the run's is gone before the export is loaded
    if layout.resolved_recipe.is_file():
        (folder / RECIPE_FILE).write_text(publishable_recipe(layout.resolved_recipe.read_text()), encoding="utf-8")
    verification = verify_folder(folder, reference, config.dtype)
    log.info("export: %s reloads with plain transformers; logits max abs diff %.3g (allowed %.3g); "
             "generates from %r: %r", folder, verification["max_abs_logit_diff"], verification["allowed"],
             prompt, verification["sample"][:120])
    exported = Exported(name, stages, verification, written["dropped_vocabulary_files"], folder.name)
    build_card(layout, facts, config, exported).save(folder / REPOCARD_NAME)
    return {"source": str(source), "folder": str(folder), "dtype": config.dtype, **written,
            "verification": verification, "files": file_hashes(folder)}


def run(slice_: ExportSlice, ctx: StageContext) -> dict[str, Any]:
    """The export stage: the run's last trained model (stage2, else stage1)."""
    config = slice_.config
    from langadapt.export.hub import check_push, push

    if config.push_to_hub:
        check_push(config.repo_id)  # before the slow part, like every check below
    check_replaceable(ctx)
    models = ctx.own_models()
    stages = require_trained(ctx.layout.final(), models)
    name = next(n for n, stage in MODEL_STAGES.items() if stage == stages[-1])
    summary = export_model(ctx.layout.export, ctx.layout.final(), config, slice_.facts, name, stages,
                           ctx.layout.trained(stages[-1]).model, ctx.base_model)
    if config.push_to_hub:
        summary["pushed"] = push(ctx.layout.export.model, str(config.repo_id), config.private)
    return summary


def export_checkpoint(spec: str, layout: RunLayout, config: ExportConfig, facts: RunFacts, base_model: str | None,
                      overwrite: bool) -> ExportPaths:
    """`langadapt export --checkpoint STAGE/STEP`: export one saved checkpoint of a training stage
    into its own folder (with a manifest; it never replaces the run's export)."""
    from langadapt.run.completion import promote, write_manifest
    from langadapt.run.layout import complete_checkpoints

    stage, step = parse_checkpoint(spec)
    root = layout.trained(stage).checkpoints
    found = complete_checkpoints(root)
    if step not in found:
        raise LangadaptError(f"--checkpoint {spec}: no complete checkpoint at step {step} in {root} "
                             f"(there: {', '.join(map(str, sorted(found))) or 'none'})")
    if not is_complete(layout.embeddings.root):
        raise LangadaptError(f"--checkpoint {spec}: the embeddings stage (the run's architecture and tokenizer) is not complete")
    name = f"{stage}-step{step}"
    paths = layout.checkpoint_export(name)
    if paths.root.exists() and not overwrite:
        raise LangadaptError(f"{paths.root}: exists already; pass --overwrite to replace it")
    # Built beside its final place and swapped in once checked: a failure leaves no half-written folder.
    work = ExportPaths(paths.root.with_name(f".{name}.partial"))
    shutil.rmtree(work.root, ignore_errors=True)
    stages = tuple(s for s in completed_training_stages(layout) if TRAINING_STAGES.index(s) < TRAINING_STAGES.index(stage))
    with checkpoint_folder(layout, found[int(step)]) as source:
        summary = export_model(work, layout, config, facts, name, (*stages, stage), source, base_model)
    summary.update(source=str(found[int(step)]), folder=str(paths.model), checkpoint=True)
    write_manifest(work.root, {"stage": "export", "checkpoint": spec, "summary": summary})
    promote(work.root, paths.root, paths.root.with_name(f".{name}.previous"))
    return paths


def verified_for_push(paths: ExportPaths, layout: RunLayout, config: ExportConfig) -> None:
    """Before pushing an existing export: its card parses, and the files the last export verified
    are unchanged (a hand-edited card is fine; changed weights or tokenizer are checked again)."""
    from huggingface_hub import ModelCard
    from transformers import AutoModelForCausalLM

    manifest = read_manifest(paths.root).get("summary", {})
    if "verification" not in manifest:
        raise LangadaptError(f"{paths.model}: no verification recorded (exported by an older langadapt?); "
                             "re-export with --overwrite before pushing")
    try:
        ModelCard.load(paths.model / REPOCARD_NAME)
    except Exception as exc:
        raise LangadaptError(f"{paths.model / REPOCARD_NAME}: not a valid model card ({exc})") from None
    current, recorded = file_hashes(paths.model), manifest.get("files", {})
    changed = sorted(f for f in set(current) | set(recorded) if f != REPOCARD_NAME and current.get(f) != recorded.get(f))
    if not changed:
        return
    log.info("export: %s changed since the export; checking the folder again", ", ".join(changed[:3]))
    with (checkpoint_folder(layout, Path(manifest["source"])) if manifest.get("checkpoint")
          else contextlib.nullcontext(Path(manifest["source"]))) as source:
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).eval()
        reference = probe(model, source, manifest["verification"]["prompt"])
    del model
    verify_folder(paths.model, reference, manifest.get("dtype", config.dtype))
