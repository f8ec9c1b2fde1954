"""Memory per GPU: model states under ZeRO stages 0-3 or FSDP2, plus activations.

Model states follow the ZeRO paper (Rajbhandari et al. 2020, section 3.1 and figure 1): mixed
precision Adam keeps 2 bytes of 16-bit weights, 2 of 16-bit gradients and K = 12 of optimizer
state (fp32 master weights, momentum, variance) per parameter. Over Nd data-parallel GPUs,
stage 1 partitions the optimizer states, stage 2 also the gradients, stage 3 also the weights.
Their 7.5B-parameter example on 64 GPUs: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB. The ZeRO-0 row is the
torch engine: fp32 weights and gradients and AdamW's two moments, the same 16 bytes split
otherwise; under DDP its gradients are views into the all-reduce buckets (no second copy). Frozen parameters
(stage 1 of our method: the body) have weights but neither gradients nor optimizer state, which
is why that stage rarely needs ZeRO-3 (it runs there as asked: a body too large to hold whole).
The paper's per-GPU figures are the shards alone; ZeRO-3 also holds what it gathers to compute
(`zero3_gathered_bytes`: two blocks and the head in bf16, one block's gradient), counted here.
The paper's 2 bytes of gradient are 16-bit gradients; langadapt has DeepSpeed accumulate and
reduce them in fp32 under bf16 (train/engines/deepspeed_engine.py, FP32_GRADIENTS), which its rows
count (`DEEPSPEED_GRADIENT_BYTES`), with DeepSpeed's reduction buckets (`deepspeed_buffer_bytes`).

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
the head (engine.fused_loss: the logits exist one chunk at a time, negligible). Fragmentation, NCCL's
own buffers and the CUDA context (1-3 GB) are not included.
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


DEEPSPEED_GRADIENT_BYTES = {1: 6.0, 2: 4.0, 3: 4.0}
"""Gradient bytes per trainable parameter under DeepSpeed ZeRO-1/2/3 with bf16 weights and fp32
accumulation (DeepSpeed 0.19.8). ZeRO-1 runs DeepSpeed's BF16_Optimizer: every parameter's bf16
gradient plus a whole fp32 copy it accumulates into (not partitioned: ZeRO-1 partitions only the
optimizer), 2 + 4. ZeRO-2 and ZeRO-3 keep only their fp32 partition (divided over the ranks)."""
DEEPSPEED_REDUCE_BUCKET = 500_000_000
"""DeepSpeed's default `zero_optimization.reduce_bucket_size`, in elements."""


def deepspeed_buffer_bytes(stage: int, trainable: float, reduce_bucket: float = DEEPSPEED_REDUCE_BUCKET,
                           overlap_comm: bool | None = None) -> float:
    """Bytes of DeepSpeed's gradient-reduction buffers per GPU (0.19.8, fp32 reduction), beside the
    model states. ZeRO-1: the fp32 gradients are all-reduced through a flattened copy of at most one
    bucket. ZeRO-2: a bf16 staging bucket allocated whole at its configured size however small the
    model (two with `overlap_comm`, off by default at this stage), and the fp32 copy of a full one that
    is reduced. ZeRO-3: one fp32 bucket allocated whole (`overlap_comm` on by default changes
    streams, not buffers). At the default bucket size that is 2, 3 and 2 GB: on a small GPU set
    `engine.deepspeed_config.zero_optimization.reduce_bucket_size` lower (5e7: 0.2-0.3 GB)."""
    filled = min(float(reduce_bucket), trainable)
    if stage == 1:
        return 4.0 * filled
    if stage == 2:
        return 2.0 * reduce_bucket * (2 if overlap_comm else 1) + 4.0 * filled
    if stage == 3:
        return 4.0 * reduce_bucket
    return 0.0


def autocast_weight_copies(model: ModelDims) -> float:
    """Bytes of the bf16 weight copies autocast makes for the torch engine (fp32 weights, bf16
    compute): every weight a matmul reads is cast once per forward and the copy is kept for the
    backward, so the body and the head are held twice during a step (2 extra bytes each; the input
    embedding's lookup runs in fp32 and is not cast). The sharded engines compute on bf16 weights
    and make no such copy. On an H100 (1.1B Llama, benchmarks/README.md) the plan without it was 9%
    under the measured peak (50.5 vs 55.1 GiB); with it, 5% (52.4). On CPU (benchmarks/plan_memory.py)
    18% and 10%."""
    return 2.0 * (model.num_params() - (0 if model.tied else model.vocab * model.hidden))


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
    reduce_bucket: float = DEEPSPEED_REDUCE_BUCKET,
    overlap_comm: bool | None = None,
) -> dict[str, float]:
    """GB per GPU: weights, gradients, optimizer, buffers, activations and their total.

    `stage`: a ZeRO stage 0-3 (0: the torch engine; 1-3: DeepSpeed, whose `reduce_bucket` and
    `overlap_comm` size its buffers), or "fsdp" (FSDP2; `reshard_after_forward` and `cpu_offload`
    are engine.fsdp's)."""
    buffers = 0.0
    if stage == "fsdp":
        states = fsdp_model_states(model, trainable, num_gpus, reshard_after_forward, cpu_offload)
    else:
        train = model.num_params() if trainable == "all" else model.embedding_params()
        states = zero_model_states(model.num_params(), train, stage, num_gpus,
                                   grad_bytes=DEEPSPEED_GRADIENT_BYTES.get(stage, 2.0))
        if stage == 3:
            gathered = zero3_gathered_bytes(model, trainable)
            states = {k: states[k] + gathered.get(k, 0.0) for k in ("weights", "gradients", "optimizer")}
        buffers = deepspeed_buffer_bytes(stage, train, reduce_bucket, overlap_comm)
        if stage == 0:
            states["weights"] += autocast_weight_copies(model)
    activations = activation_bytes(model, seq_len, micro_batch, checkpointing, fused_loss)
    out = {k: states[k] / GB for k in ("weights", "gradients", "optimizer")}
    out["buffers"] = buffers / GB
    out["activations"] = activations / GB
    out["total"] = sum(out.values())
    return out
