"""Export: the last trained model as a plain Hugging Face folder, a model card, an optional push.

The folder is checked the way a user would use it: loaded with AutoModelForCausalLM and
AutoTokenizer and asked to generate; the stage fails (and is not marked complete) if that breaks.
An exported folder is a thing people edit (the model card above all): the manifest records a
hash of every file, and a re-export that would replace a changed file stops unless the user
passed `--overwrite`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch

from langadapt.contenthash import HashCache
from langadapt.context import StageContext
from langadapt.errors import LangadaptError
from langadapt.export.card import build_card
from langadapt.export.config import ExportConfig

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def last_trained_model(ctx: StageContext) -> Path:
    """The newest model of the run (adapted, else stage1, else init), as the pipeline lists them."""
    models = ctx.models if ctx.models is not None else ctx.layout.models_on_disk()
    if not models:
        raise LangadaptError(f"{ctx.run_dir}: no model to export (no embeddings, stage1 or stage2 model)")
    name, path = list(models.items())[-1]
    if not (path / "config.json").is_file():
        raise LangadaptError(f"{ctx.run_dir}: model {name} missing at {path}; its stage did not complete")
    return path


def file_hashes(folder: Path) -> dict[str, str]:
    return HashCache(None).hash_paths([folder], relative_to=folder)


def check_replaceable(ctx: StageContext) -> None:
    """Refuse to replace an exported folder whose files differ from what the last export wrote."""
    final = ctx.layout.final()
    folder = final.export.model
    if ctx.overwrite or not folder.exists():
        return
    try:
        recorded = json.loads(final.manifest(ctx.stage).read_text())["summary"]["files"]
    except (OSError, ValueError, KeyError, TypeError):
        recorded = None
    current = file_hashes(folder)
    if recorded is None:
        raise LangadaptError(f"{folder}: exists and was not written by this run's export; "
                             "pass --overwrite to replace it")
    changed = sorted(name for name in set(current) | set(recorded) if current.get(name) != recorded.get(name))
    if changed:
        raise LangadaptError(f"{folder}: {', '.join(changed[:3])} changed since it was exported "
                             "(edited by hand?); pass --overwrite to replace it")


def smoke_generate(folder: Path, prompt: str = "Det er", max_new_tokens: int = 20) -> str:
    """Load the exported folder with plain transformers and generate greedily."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    inputs = tokenizer(prompt, return_tensors="pt")
    with torch.no_grad():
        output = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False,
                                pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id)
    return tokenizer.decode(output[0], skip_special_tokens=True)


def push(folder: Path, config: ExportConfig) -> str:
    from huggingface_hub import HfApi

    if not config.repo_id:
        raise LangadaptError("export.repo_id: required when export.push_to_hub is true")
    api = HfApi()
    try:
        api.create_repo(config.repo_id, private=config.private, exist_ok=True)
        info = api.upload_folder(folder_path=str(folder), repo_id=config.repo_id,
                                 commit_message="Upload model exported by langadapt")
    except Exception as exc:  # auth / network problems are the user's to fix
        raise LangadaptError(f"export.repo_id {config.repo_id}: push failed ({type(exc).__name__}: {exc})") from None
    return str(info)


def run(config: ExportConfig, ctx: StageContext, target_languages: list[str]) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_replaceable(ctx)  # before the slow part: the answer does not depend on it
    source = last_trained_model(ctx)
    folder = ctx.layout.export.model
    model = AutoModelForCausalLM.from_pretrained(source, dtype=DTYPES[config.dtype])
    model.save_pretrained(folder, safe_serialization=True)
    AutoTokenizer.from_pretrained(source).save_pretrained(folder)
    if ctx.layout.resolved_recipe.is_file():
        shutil.copy(ctx.layout.resolved_recipe, folder / "langadapt_recipe.yaml")
    languages = config.languages or target_languages
    build_card(ctx.layout, ctx.base_model, languages, config.license, config.description).save(ctx.layout.export.card)
    sample = smoke_generate(folder)
    (ctx.out / "sample.json").write_text(json.dumps({"prompt": "Det er", "greedy": sample}, ensure_ascii=False))
    ctx.log.info("export: %s loads and generates: %r", folder, sample[:120])
    files = file_hashes(folder)  # before the push: what a later re-export compares against
    pushed = push(folder, config) if config.push_to_hub else None
    return {"source": str(source), "folder": str(folder), "dtype": config.dtype, "sample": sample,
            "pushed": pushed, "files": files}
