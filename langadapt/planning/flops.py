"""Training FLOPs per token: one formula for `langadapt plan` and for the trainer's measured MFU.

A weight used in a matmul costs 2 FLOPs per token forward, 2 for the gradient of its input
(activation gradient) and 2 for its own gradient: 6N for full training (Kaplan et al. 2020;
Chinchilla's C = 6ND). N counts the parameters that take part in matmuls: every parameter except
an untied input-embedding table, which is a lookup (as Megatron and OLMo-core count it when they
report MFU, so our MFU compares with theirs; for Mistral-7B the lookup would add 3.6%). A tied
embedding matrix is the head's matmul and counts once. PaLM (Chowdhery et al. 2022, appendix B)
adds the attention score and mixing matmuls, which have no weights: 12 x layers x heads x
head_dim x seq_len per token (forward 4LHQT, backward twice that; the causal mask not discounted).

A frozen-body stage (stage 1: only embeddings and LM head train) still runs the forward pass
(2N) and backpropagates activation gradients through the whole body down to the input
embeddings (2N), but computes weight gradients only for the trainable matmuls (the head):
4N + 2N_trainable, about 2/3 of a full step when the body dominates. The attention term is
unchanged (its backward is an activation gradient).
"""

from __future__ import annotations

from typing import Literal

from langadapt.planning.models import ModelDims

Trainable = Literal["all", "embeddings"]


def attention_flops_per_token(layers: int, attn_dim: int, seq_len: int) -> float:
    """12 L (H Q) T: PaLM appendix B's attention term for training (forward + backward)."""
    return 12.0 * layers * attn_dim * seq_len


def dense_flops_per_token(matmul_params: float, trainable_matmul_params: float) -> float:
    """4N (forward + activation gradients) + 2N_trainable (weight gradients); 6N when all train."""
    return 4.0 * matmul_params + 2.0 * trainable_matmul_params


def matmul_params(model: ModelDims) -> int:
    """Parameters used in matmuls: the body and the head (an untied input table is a lookup)."""
    return model.body_params() + model.vocab * model.hidden


def flops_per_token(
    model: ModelDims, seq_len: int, trainable: Trainable = "all", attention: bool = True
) -> float:
    """Training FLOPs per token: 6N (+ attention) when all train, 4N + 2N_head when the body is frozen."""
    n = matmul_params(model)
    if trainable == "all":
        dense = dense_flops_per_token(n, n)
    elif trainable == "embeddings":
        dense = dense_flops_per_token(n, model.vocab * model.hidden)
    else:
        raise ValueError(f"trainable must be 'all' or 'embeddings', got {trainable!r}")
    extra = attention_flops_per_token(model.layers, model.attn_dim, seq_len) if attention else 0.0
    return dense + extra


def mfu(tokens_per_second: float, flops_per_tok: float, peak_flops: float) -> float:
    """Model FLOPs utilisation: achieved model FLOP/s over the peak of the devices used."""
    return tokens_per_second * flops_per_tok / peak_flops


def tokens_per_second(mfu_value: float, flops_per_tok: float, peak_flops: float) -> float:
    """Throughput an MFU implies (the inverse of `mfu`), e.g. per GPU with one GPU's peak."""
    return mfu_value * peak_flops / flops_per_tok
