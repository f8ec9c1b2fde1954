"""The GPU fast path: the model and its loss as one module, a fused head + loss, regional compile.

Both engines wrap `CausalLMLoss`, never the bare model, so DDP and DeepSpeed see the loss
inside their forward (a fused loss reads the head's weight directly: under DDP that must happen
inside the wrapped forward).

- Fused linear + cross-entropy (liger-kernel's Triton kernel, NVIDIA and AMD): the head and the
  loss run chunk by chunk, so the [tokens x vocab] logits (16 x 2048 x 32k fp32 = 4 GiB on the
  1B benchmark) never exist. That memory is what lets the micro-batch double, and the softmax
  over it is memory-bound time. Only for heads that are plain `head(hidden)` (`modeling`). It
  reads the head's weight directly, outside the head's forward: ZeRO-3 must be told
  (engines.deepspeed_engine registers it as an external parameter).
- Regional compile: `torch.compile` of each decoder block IN PLACE (`Module.compile`), the way
  torchtitan compiles per block: parameter names, checkpoints and DeepSpeed's hooks stay as they
  are, all blocks share one compiled graph (compile time of one block, not the model), and the
  fused loss stays eager (dynamo cannot trace liger's kernel launch). Under ZeRO-3 each block is
  a ZeRO-3 leaf (its weights gathered together at its edge, as FSDP2 gathers a block) and only
  its forward is compiled, so the gathers stay outside the graph (engines.deepspeed_engine).

Measured on an H100 in benchmarks/README.md (train_throughput, gpu-1b preset).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from langadapt.errors import LangadaptError
from langadapt.modeling import body_and_head, head_is_plain_by_config, head_splits_cleanly

if TYPE_CHECKING:
    from langadapt.train.distill import ReplayDistillation

log = logging.getLogger("langadapt.train")


class CausalLMLoss(torch.nn.Module):
    """`model` plus its mean next-token cross-entropy; the batch is already shifted.

    Holds the model as its only child, so `state_dict` keys gain a `model.` prefix: engines save
    and export through `.model`, never through this wrapper.
    """

    def __init__(self, model: torch.nn.Module, fused: bool, distillation: ReplayDistillation | None = None) -> None:
        super().__init__()
        self.model = model
        self.distillation = distillation  # a plain attribute: its teacher is no parameter of this module
        self.fused = None
        if fused:
            from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

            # fp32 accumulation of the head's gradient over chunks, also when weights are bf16.
            self.fused = LigerFusedLinearCrossEntropyLoss(accum_dtype=torch.float32)

    def forward(self, inputs: torch.Tensor, labels: torch.Tensor,
                position_ids: torch.Tensor | None = None, distill_rows: torch.Tensor | None = None) -> torch.Tensor:
        """The mean cross-entropy; plus, for the rows `distill_rows` (bool [batch]) marks, the
        replay distillation term (`langadapt.train.distill`), which needs the logits: a micro-batch
        with such rows takes the unfused path."""
        model_kwargs = model_inputs(self.model, inputs, position_ids)
        distil = self.distillation is not None and distill_rows is not None and bool(distill_rows.any())
        if self.fused is None or distil:
            logits = self.model(**model_kwargs).logits
            loss = F.cross_entropy(logits.float().flatten(0, -2), labels.flatten())
            return loss + self.distillation.loss(logits, model_kwargs, distill_rows) if distil else loss
        body, head = body_and_head(self.model)
        hidden = body(**model_kwargs).last_hidden_state
        return self.fused(head.weight, hidden.flatten(0, 1), labels.flatten(), getattr(head, "bias", None))


DOCUMENT_MASKING_ATTENTION = ("eager", "sdpa", "flex_attention", "flash_attention_2", "flash_attention_3")
"""Attention implementations that honour document boundaries given position ids (transformers 5):
the first three through the block-diagonal causal mask `masking_utils` builds when position ids
restart, flash-attention through its variable-length kernel."""


def model_inputs(model: torch.nn.Module, inputs: torch.Tensor, position_ids: torch.Tensor | None) -> dict:
    """The forward's keyword arguments; with `position_ids` (document masking) attention stays
    inside each document.

    transformers derives the block-diagonal mask from position ids by itself for eager, SDPA and
    flex attention (only with no attention mask and no cache, as here). Its flash-attention path
    reads packing only from ONE flattened row, so the batch is flattened and the cumulative
    document lengths are computed once here: without them every layer would re-derive them with a
    device sync. Rows stay separate documents because every row's positions start at 0.
    """
    kwargs: dict = {"input_ids": inputs, "use_cache": False}
    if position_ids is None:
        return kwargs
    position_ids = position_ids.to(inputs.device)
    if model.config._attn_implementation.startswith("flash_attention"):
        from transformers.modeling_flash_attention_utils import prepare_fa_kwargs_from_position_ids

        inputs, position_ids = inputs.reshape(1, -1), position_ids.reshape(1, -1)
        (cu_q, cu_k), (max_q, max_k) = prepare_fa_kwargs_from_position_ids(position_ids)
        kwargs.update(cu_seq_lens_q=cu_q, cu_seq_lens_k=cu_k, max_length_q=max_q, max_length_k=max_k)
    return {**kwargs, "input_ids": inputs, "position_ids": position_ids}


def check_document_masking(model: torch.nn.Module) -> None:
    """Refuse an attention implementation that would ignore the position ids' document boundaries."""
    attention = model.config._attn_implementation
    if attention not in DOCUMENT_MASKING_ATTENTION:
        raise LangadaptError(f"data.document_masking: engine.attn_implementation {attention!r} does not honour "
                             f"document boundaries; use one of {', '.join(DOCUMENT_MASKING_ATTENTION)}")


def use_fused_loss(model: torch.nn.Module, setting: bool) -> bool:
    """Whether this model trains with the fused loss; `setting` is the resolved engine.fused_loss.

    Refused (error) when the head is not plain. The device and install checks are made earlier,
    in `settings.check_engine`.
    """
    if not setting:
        return False
    # Weights ZeRO-3 loaded partitioned (shape [0] outside its engine) cannot run the probe; the
    # config check, which names every known logit transform, decides alone there.
    probe = not any(hasattr(p, "ds_id") for p in model.parameters())
    if not head_is_plain_by_config(model) or (probe and not head_splits_cleanly(model, next(model.parameters()).device)):
        raise LangadaptError(f"engine.fused_loss: {type(model).__name__}'s logits are not head(hidden) "
                             "(soft-capped or scaled); set engine.fused_loss: false")
    return True


def repeated_blocks(model: torch.nn.Module) -> torch.nn.ModuleList | None:
    """The decoder's list of identical blocks (Llama `model.layers`, GPT-2 `transformer.h`, ...)."""
    for module in model.modules():
        if (isinstance(module, torch.nn.ModuleList) and len(module) > 0
                and all(type(block) is type(module[0]) for block in module)):
            return module
    return None


def compile_blocks(model: torch.nn.Module, hooks_outside: bool = False) -> int:
    """Compile every decoder block in place; returns how many (0: no repeated blocks found).

    `hooks_outside`: compile each block's `forward` only, so that the module hooks around it run
    eagerly at the block's edges instead of being traced (DeepSpeed ZeRO-3's, whose fetch and
    release are excluded from tracing and would otherwise break the graph twice per block)."""
    blocks = repeated_blocks(model)
    if blocks is None:
        log.warning("engine.compile: no repeated decoder blocks found in %s; not compiled", type(model).__name__)
        return 0
    for block in blocks:
        if hooks_outside:
            block.forward = torch.compile(block.forward)
        else:
            block.compile()
    return len(blocks)
