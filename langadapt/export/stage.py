"""Export: the last trained model as a plain Hugging Face folder, a model card, an optional push.

The folder is checked the way a user would use it: loaded with AutoModelForCausalLM and
AutoTokenizer and asked to generate; the stage fails (and is not marked complete) if that breaks.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch

from langadapt.context import StageContext
from langadapt.errors import LangadaptError
from langadapt.export.card import build_card
from langadapt.export.config import ExportConfig

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
MODEL_SOURCES = ("stage2", "stage1", "embeddings")


def last_trained_model(ctx: StageContext) -> Path:
    """The newest model of the run: stage 2, else stage 1, else the initialised one."""
    for stage in MODEL_SOURCES:
        folder = ctx.stage_dir(stage) / "model"
        if (folder / "config.json").is_file():
            return folder
    raise LangadaptError(f"{ctx.run_dir}: no model to export (none of {', '.join(MODEL_SOURCES)} produced one)")


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

    source = last_trained_model(ctx)
    folder = ctx.out / "model"
    model = AutoModelForCausalLM.from_pretrained(source, dtype=DTYPES[config.dtype])
    model.save_pretrained(folder, safe_serialization=True)
    AutoTokenizer.from_pretrained(source).save_pretrained(folder)
    resolved = ctx.run_dir / "recipe.resolved.yaml"
    if resolved.is_file():
        shutil.copy(resolved, folder / "langadapt_recipe.yaml")
    languages = config.languages or target_languages
    build_card(ctx.run_dir, ctx.base_model, languages, config.license, config.description).save(folder / "README.md")
    sample = smoke_generate(folder)
    (ctx.out / "sample.json").write_text(json.dumps({"prompt": "Det er", "greedy": sample}, ensure_ascii=False))
    ctx.log.info("export: %s loads and generates: %r", folder, sample[:120])
    pushed = push(folder, config) if config.push_to_hub else None
    return {"source": str(source), "folder": str(folder), "dtype": config.dtype, "sample": sample, "pushed": pushed}
