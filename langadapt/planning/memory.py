"""Memory per GPU: model states under ZeRO stages 0-3, plus activations.

Model states follow the ZeRO paper (Rajbhandari et al. 2020, section 3.1 and figure 1): mixed
precision Adam keeps 2 bytes of 16-bit weights, 2 of 16-bit gradients and K = 12 of optimizer
state (fp32 master weights, momentum, variance) per parameter. Over Nd data-parallel GPUs,
stage 1 partitions the optimizer states, stage 2 also the gradients, stage 3 also the weights.
Their 7.5B-parameter example on 64 GPUs: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB. Frozen parameters
(stage 1 of our method: the body) have weights but neither gradients nor optimizer state, which
is why that stage needs no ZeRO-3.

Activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models", section 4): one transformer layer stores s*b*h*(34 + 5*a*s/h) bytes with
16-bit activations (s sequence, b micro batch, h hidden, a heads); FlashAttention-style kernels
remove the 5as/h term (the attention matrix is never stored: their "selective recomputation");
full recomputation (activation checkpointing) keeps only each layer's 2*s*b*h-byte input, plus
one layer's full activations while it is recomputed. The constant 34 was derived for a GPT
block with a 4h MLP: it is an estimate for gated MLPs and GQA. We add the logits, s*b*V*4 bytes
(fp32 for the loss), which dominate for 128k-256k vocabularies, unless the loss is fused with
the head (engine.fused_loss: the logits exist one chunk at a time, negligible). Fragmentation, communication
buffers and the CUDA context (1-3 GB) are not included.
"""

from __future__ import annotations

from typing import Literal

from langadapt.planning.models import ModelDims

GB = 1e9
Checkpointing = Literal["none", "flash", "full"]


def zero_model_states(
    params: float,
    trainable: float | None = None,
    stage: int = 0,
    num_gpus: int = 1,
    weight_bytes: float = 2.0,
    grad_bytes: float = 2.0,
    optimizer_bytes: float = 12.0,
) -> dict[str, float]:
    """Bytes per GPU of weights, gradients and optimizer states under a ZeRO stage.

    `trainable` (default: all `params`) is what has gradients and optimizer states; the rest is
    frozen and only has weights.
    """
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"ZeRO stage must be 0-3, got {stage}")
    trainable = params if trainable is None else trainable
    nd = float(num_gpus)
    weights = weight_bytes * params / (nd if stage >= 3 else 1.0)
    grads = grad_bytes * trainable / (nd if stage >= 2 else 1.0)
    optimizer = optimizer_bytes * trainable / (nd if stage >= 1 else 1.0)
    return {
        "weights": weights,
        "gradients": grads,
        "optimizer": optimizer,
        "total": weights + grads + optimizer,
    }


def layer_activation_bytes(
    seq_len: int, micro_batch: int, hidden: int, heads: int, flash: bool = False
) -> float:
    """Korthikanti et al.: s*b*h*(34 + 5*a*s/h) bytes per layer; 34*s*b*h when attention scores are not stored."""
    sbh = float(seq_len) * micro_batch * hidden
    return sbh * (34.0 + (0.0 if flash else 5.0 * heads * seq_len / hidden))


def activation_bytes(
    model: ModelDims, seq_len: int, micro_batch: int, checkpointing: Checkpointing = "flash",
    fused_loss: bool = False,
) -> float:
    """Activation memory of one micro batch on one GPU (no tensor or pipeline parallelism)."""
    per_layer = layer_activation_bytes(
        seq_len, micro_batch, model.hidden, model.heads, flash=checkpointing != "none"
    )
    if checkpointing == "full":
        # Stored layer inputs, plus the one layer whose activations are rebuilt during its backward.
        body = 2.0 * seq_len * micro_batch * model.hidden * model.layers + per_layer
    else:
        body = per_layer * model.layers
    logits = 0.0 if fused_loss else 4.0 * seq_len * micro_batch * model.vocab
    return body + logits


def memory_per_gpu(
    model: ModelDims,
    stage: int,
    num_gpus: int,
    seq_len: int,
    micro_batch: int,
    trainable: Literal["all", "embeddings"] = "all",
    checkpointing: Checkpointing = "flash",
    fused_loss: bool = False,
) -> dict[str, float]:
    """GB per GPU: weights, gradients, optimizer, activations and their total."""
    train = model.num_params() if trainable == "all" else model.embedding_params()
    states = zero_model_states(model.num_params(), train, stage, num_gpus)
    activations = activation_bytes(model, seq_len, micro_batch, checkpointing, fused_loss)
    out = {k: v / GB for k, v in states.items() if k != "total"}
    out["activations"] = activations / GB
    out["total"] = (states["total"] + activations) / GB
    return out
