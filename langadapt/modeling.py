"""What langadapt assumes about a Hugging Face causal LM: a body, then a plain linear head.

Evaluation (scoring only the positions it needs, a chunk of head rows at a time) and training
(a fused linear + cross-entropy loss that never materialises the [tokens x vocab] logits) both
run the body and the head separately. That is exact for most causal LMs; it is not for heads
that transform their logits (Gemma-2's soft-capping, Cohere's logit scale, Granite's scaling),
which must go through the model's own forward.
"""

from __future__ import annotations

import torch

LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling")
"""Config keys of families whose logits are not `head(hidden)`: a transform that happens to be
an identity on the 16-token probe of `head_splits_cleanly` is still caught."""


def body_and_head(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module] | None:
    """(decoder body, output head) of a causal LM, or None when it has no separate head."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    body = getattr(model, "base_model", None)
    if head is None or body is None or body is model:
        return None
    return body, head


@torch.inference_mode()
def head_splits_cleanly(model: torch.nn.Module, device: torch.device) -> bool:
    """Whether `head(base_model(x))` reproduces `model(x).logits` (checked on 16 tokens)."""
    parts = body_and_head(model)
    if parts is None:
        return False
    body, head = parts
    probe = torch.arange(16, device=device)[None] % model.config.vocab_size
    try:
        split = head(body(input_ids=probe, use_cache=False).last_hidden_state)
    except (AttributeError, TypeError):
        return False
    whole = model(input_ids=probe, use_cache=False).logits
    return split.shape == whole.shape and torch.allclose(split.float(), whole.float(), rtol=1e-4, atol=1e-4)


def head_is_plain_by_config(model: torch.nn.Module) -> bool:
    """No logit transform declared in the config (see LOGIT_TRANSFORMS)."""
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    transforms = [k for k in LOGIT_TRANSFORMS if getattr(text, k, None) not in (None, 1, 1.0)]
    return body_and_head(model) is not None and not transforms
