"""Reading and replacing a causal LM's input embeddings, output head (and head bias).

The surgery runs offline on a normal, fully materialised checkpoint (`from_pretrained` on one
process, no DeepSpeed): under ZeRO-3 every parameter appears with shape [0] until gathered, and
stage 1 needs no ZeRO-3 anyway (only embeddings and head carry optimizer state). A zero-size
matrix is therefore reported as a user error instead of being silently "initialised".

Resizing goes through `PreTrainedModel.resize_token_embeddings`, which knows each family's
module names (Llama `embed_tokens`/`lm_head`, GPT-2 `wte`, GPT-NeoX `embed_in`/`embed_out`,
BLOOM `word_embeddings`, ...), updates `config.vocab_size` and re-ties tied heads; we then
overwrite every row with the planned values.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from langadapt.errors import LangadaptError


@dataclass
class EmbeddingMatrices:
    """The matrices a vocabulary change touches; `output` is None when tied to `input`."""

    input: torch.Tensor
    output: torch.Tensor | None
    bias: torch.Tensor | None

    @property
    def tied(self) -> bool:
        return self.output is None


def _check_materialised(weight: torch.Tensor, what: str, model: PreTrainedModel) -> None:
    if weight.ndim != 2 or weight.numel() == 0 or weight.device.type == "meta":
        raise LangadaptError(
            f"{what} of {type(model).__name__} has shape {tuple(weight.shape)} on {weight.device}: load a normal "
            "checkpoint (no ZeRO-3 partitioning, no meta device) before the embedding surgery"
        )


def read_matrices(model: PreTrainedModel) -> EmbeddingMatrices:
    """The current input matrix, untied output head (None when tied) and head bias, detached."""
    inp = model.get_input_embeddings()
    if inp is None:
        raise LangadaptError(f"{type(model).__name__} exposes no input embeddings (get_input_embeddings)")
    _check_materialised(inp.weight, "input embeddings", model)
    head = model.get_output_embeddings()
    if head is None:  # families without a separate head module always share the input matrix
        return EmbeddingMatrices(inp.weight.detach(), None, None)
    _check_materialised(head.weight, "output head", model)
    tied = head.weight is inp.weight or head.weight.data_ptr() == inp.weight.data_ptr()
    bias = getattr(head, "bias", None)
    return EmbeddingMatrices(
        input=inp.weight.detach(),
        output=None if tied else head.weight.detach(),
        bias=None if bias is None else bias.detach(),
    )


@torch.no_grad()
def write_matrices(model: PreTrainedModel, new: EmbeddingMatrices) -> None:
    """Resize the model to `new.input.shape[0]` rows and copy the new values in, in place."""
    rows = new.input.shape[0]
    model.resize_token_embeddings(rows, mean_resizing=False)
    inp = model.get_input_embeddings()
    inp.weight.copy_(new.input.to(inp.weight.dtype))
    head = model.get_output_embeddings()
    if head is None:
        return
    if new.tied:
        if head.weight.data_ptr() != inp.weight.data_ptr():
            raise RuntimeError("a tied head was untied by resizing")  # a transformers bug, not a user error
    else:
        head.weight.copy_(new.output.to(head.weight.dtype))
    if new.bias is not None and getattr(head, "bias", None) is not None:
        head.bias.copy_(new.bias.to(head.bias.dtype))


def set_special_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> dict[str, int | None]:
    """Point the model (and generation) config at the NEW tokenizer's bos/eos/pad ids."""
    ids = {f"{role}_token_id": getattr(tokenizer, f"{role}_token_id", None) for role in ("bos", "eos", "pad")}
    configs = [model.config, model.config.get_text_config()]
    if getattr(model, "generation_config", None) is not None:
        configs.append(model.generation_config)
    for config in configs:
        for key, value in ids.items():
            setattr(config, key, value)
    return ids
