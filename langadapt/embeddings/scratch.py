"""`init: scratch`: a randomly initialised model sized for the new tokenizer (the cold baseline).

This is what every warm run is compared with, and how the toolkit makes its own tiny English
source model for the demo. It stands in the embeddings stage's place so that stage 2 finds its
starting model in the same folder either way.
"""

from __future__ import annotations

from typing import Any

import torch

from langadapt.planning.models import architecture_config
from langadapt.recipe.embeddings import ScratchSlice
from langadapt.run.context import StageContext


def build_scratch_model(architecture: dict[str, Any], tokenizer: Any, seed: int) -> torch.nn.Module:
    """A transformers model from config fields, with vocab and special ids taken from the tokenizer."""
    from transformers import AutoModelForCausalLM

    config = architecture_config(architecture)
    config.vocab_size = len(tokenizer)
    for role in ("bos", "eos", "pad"):
        setattr(config, f"{role}_token_id", getattr(tokenizer, f"{role}_token_id"))
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32)


def run(slice_: ScratchSlice, ctx: StageContext) -> dict[str, Any]:
    """The embeddings stage of `init: scratch`: the model drawn for the tokenizer stage's tokenizer."""
    from transformers import AutoConfig

    from langadapt.tokenizer.loading import load_tokenizer
    from langadapt.tokenizer.saving import save_tokenizer

    tokenizer = load_tokenizer(ctx.layout.tokenizer.tokenizer, what="the tokenizer stage's output")
    architecture = slice_.architecture
    if architecture is None:  # scratch with the architecture of a given base model
        architecture = AutoConfig.from_pretrained(ctx.base_model).to_dict()
    model = build_scratch_model(architecture, tokenizer, ctx.seed)
    model.save_pretrained(ctx.layout.embeddings.model, safe_serialization=True)
    save_tokenizer(tokenizer, ctx.layout.embeddings.model)
    params = sum(p.numel() for p in model.parameters())
    ctx.log.info("embeddings: scratch %s with %.2fM parameters", model.config.model_type, params / 1e6)
    return {"method": "scratch", "parameters": params, "vocab_size": len(tokenizer)}
