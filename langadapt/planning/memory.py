"""Memory per GPU: model states under ZeRO stages 0-3 or FSDP2, plus activations.

Model states follow the ZeRO paper (Rajbhandari et al. 2020, section 3.1 and figure 1): mixed
precision Adam keeps 2 bytes of 16-bit weights, 2 of 16-bit gradients and K = 12 of optimizer
state (fp32 master weights, momentum, variance) per parameter. Over Nd data-parallel GPUs,
stage 1 partitions the optimizer states, stage 2 also the gradients, stage 3 also the weights.
Their 7.5B-parameter example on 64 GPUs: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB. Frozen parameters
(stage 1 of our method: the body) have weights but neither gradients nor optimizer state, which
is why that stage rarely needs ZeRO-3 (it runs there as asked: a body too large to hold whole).
The paper's per-GPU figures are the shards alone; ZeRO-3 also holds what it gathers to compute
(`zero3_gathered_bytes`: two blocks and the head in bf16, one block's gradient), counted here.

FSDP2 (`engine.kind: fsdp`) shards the same 16 bytes per trainable parameter over Nd GPUs as
ZeRO-3, arranged differently: fp32 weight shards (the master copy, 4 bytes, frozen ones too),
fp32 gradient shards (4) and AdamW's two moments (8). On top come the bf16 copies it all-gathers,
which are not sharded: the root group (embeddings, head, final norm) for the whole step, and
two blocks at a time (the one computing and the next, prefetched), or every block from its
forward to its backward with `reshard_after_forward: false`; plus the unsharded gradients of the
root and one block (bf16, and their fp32 copy for the reduce-scatter). With `cpu_offload` the
shards live in host memory and only the gathered copies stay on the GPU.

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


def fsdp_model_states(
    model: ModelDims,
    trainable: Literal["all", "embeddings"] = "all",
    num_gpus: int = 1,
    reshard_after_forward: bool = True,
    cpu_offload: bool = False,
) -> dict[str, float]:
    """Bytes per GPU of weights, gradients and optimizer states under FSDP2 with bf16 compute.

    Sharded states as in the module docstring, plus the gathered copies (counted under weights
    and gradients); `cpu_offload` leaves only the gathered copies on the GPU.
    """
    nd, on_gpu = float(num_gpus), 0.0 if cpu_offload else 1.0
    total, block = model.num_params(), model.layer_params()
    root = total - model.layers * block  # embeddings, head, final norm
    train = total if trainable == "all" else model.embedding_params()
    train_block = block if trainable == "all" else 0  # stage 1: no gradient in the body
    train_root = train - model.layers * train_block
    live_blocks = 2 if reshard_after_forward else model.layers
    weights = on_gpu * 4.0 * total / nd + 2.0 * (root + live_blocks * block)
    grads = on_gpu * 4.0 * train / nd + (2.0 + 4.0) * (train_root + train_block)
    optimizer = on_gpu * 8.0 * train / nd
    return {"weights": weights, "gradients": grads, "optimizer": optimizer, "total": weights + grads + optimizer}


def zero3_gathered_bytes(model: ModelDims, trainable: Literal["all", "embeddings"] = "all") -> dict[str, float]:
    """ZeRO-3's working set beside its shards, which the ZeRO paper's per-GPU figures leave out.

    Weights: bf16 copies of the block being computed and the next one, prefetched (whole blocks:
    compiled, they are ZeRO-3 leaves, and DeepSpeed's default max_live_parameters of 1e9 holds two
    7B blocks anyway), and of the LM head, which the fused loss keeps gathered through the loss
    module's forward (an external parameter). Gradients: one block's bf16 gradient before its
    reduce-scatter (the head's when the body is frozen). The same accounting as FSDP2's
    gathered copies in `fsdp_model_states`; on one GPU both are measured against the plan in
    benchmarks/train_throughput.py, over several GPUs not yet."""
    head, block = float(model.vocab * model.hidden), float(model.layer_params())
    return {"weights": 2.0 * (head + 2.0 * block), "gradients": 2.0 * (block if trainable == "all" else head)}


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
    stage: int | Literal["fsdp"],
    num_gpus: int,
    seq_len: int,
    micro_batch: int,
    trainable: Literal["all", "embeddings"] = "all",
    checkpointing: Checkpointing = "flash",
    fused_loss: bool = False,
    *,
    reshard_after_forward: bool = True,
    cpu_offload: bool = False,
) -> dict[str, float]:
    """GB per GPU: weights, gradients, optimizer, activations and their total.

    `stage`: a ZeRO stage 0-3, or "fsdp" (FSDP2; the keyword-only settings are engine.fsdp's)."""
    if stage == "fsdp":
        states = fsdp_model_states(model, trainable, num_gpus, reshard_after_forward, cpu_offload)
    else:
        train = model.num_params() if trainable == "all" else model.embedding_params()
        states = zero_model_states(model.num_params(), train, stage, num_gpus)
        if stage == 3:
            gathered = zero3_gathered_bytes(model, trainable)
            states = {k: states[k] + gathered.get(k, 0.0) for k in ("weights", "gradients", "optimizer")}
            states["total"] = sum(states.values())
    activations = activation_bytes(model, seq_len, micro_batch, checkpointing, fused_loss)
    out = {k: v / GB for k, v in states.items() if k != "total"}
    out["activations"] = activations / GB
    out["total"] = (states["total"] + activations) / GB
    return out
