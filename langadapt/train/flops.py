"""Training FLOPs per token of a live model, and peak device FLOP/s, for the trainer's MFU.

The formula (and why: 4N + 2N_trainable + attention, the input lookup not counted) lives in
`langadapt.planning.flops`, so the MFU a run measures and the one `langadapt plan` assumes are
computed the same way; here we only count N and N_trainable on the real module.

MFU = (flops/token * tokens/s per device) / peak FLOP/s per device, with the dense bf16 peak
(no sparsity) from `recipe.hardware.PEAK_BF16_TFLOPS`; fp32 runs and unknown devices report n/a
unless a peak is given (engine.peak_tflops).
"""

from __future__ import annotations

import torch

from langadapt.planning.flops import attention_flops_per_token, dense_flops_per_token
from langadapt.recipe.hardware import PEAK_BF16_TFLOPS
from langadapt.train.policy import TrainableParams, numel


def flops_per_token(model: torch.nn.Module, selection: TrainableParams, seq_len: int) -> float:
    """Training FLOPs per token of one optimizer step, given which parameters train."""
    inputs = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    lookup = id(inputs.weight) if inputs is not None else None
    outputs = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    tied = outputs is not None and id(outputs.weight) == lookup
    trainable = {id(p) for p in selection.params}
    n_mm = n_trainable = 0
    for param in model.parameters():  # tied weights appear once here; a tied head is a matmul
        if id(param) == lookup and not tied:
            continue
        n_mm += numel(param)
        n_trainable += numel(param) if id(param) in trainable else 0
    config = model.config
    heads = getattr(config, "num_attention_heads", 0)
    head_dim = getattr(config, "head_dim", None) or getattr(config, "hidden_size", 0) // max(heads, 1)
    attention = attention_flops_per_token(getattr(config, "num_hidden_layers", 0), heads * head_dim, seq_len)
    return dense_flops_per_token(n_mm, n_trainable) + attention


def peak_flops(device: torch.device, precision: str, override_tflops: float | None = None) -> float | None:
    """Peak FLOP/s of one device for MFU, or None when unknown (CPU, fp32, unlisted GPU)."""
    if override_tflops is not None:
        return override_tflops * 1e12
    if device.type != "cuda" or precision == "fp32":  # torch.cuda also covers ROCm devices
        return None
    name = torch.cuda.get_device_name(device).upper()
    for key, tflops in PEAK_BF16_TFLOPS.items():
        if key in name:
            return tflops * 1e12
    return None
