"""A CPU stand-in for liger-kernel's fused linear + cross-entropy, to test how engines feed it.

liger's Triton kernel needs a GPU, but what an engine must get right is not the kernel: it is
that the loss receives the head's WHOLE weight matrix, read outside the head's own forward
(ZeRO-3 partitions it to shape [0] there unless told otherwise). This stand-in has liger's call
signature (`loss(weight, hidden, target, bias)`, mean over tokens) and its access pattern, and
computes the same value chunk by chunk in plain torch: given a partitioned weight it fails in
its matmul, exactly where the real kernel would.

`install()` puts it where `langadapt.train.fastpath` imports liger from and tells the engine
config that the kernels run here.
"""

from __future__ import annotations

import sys
import types

import torch
import torch.nn.functional as F

CHUNK = 64
"""Tokens per chunk: several chunks on the tests' batches, as liger's kernel chunks real ones."""


CALLS = 0
"""Forward calls in this process: the test's evidence that the engine trained through the fused loss."""


class LigerFusedLinearCrossEntropyLoss(torch.nn.Module):
    def __init__(self, accum_dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.accum_dtype = accum_dtype

    def forward(self, weight: torch.Tensor, hidden: torch.Tensor, target: torch.Tensor,
                bias: torch.Tensor | None = None) -> torch.Tensor:
        global CALLS
        CALLS += 1
        if weight.dim() != 2 or weight.shape[1] != hidden.shape[-1]:
            raise RuntimeError(f"fused loss got a head weight of shape {tuple(weight.shape)} for hidden "
                               f"size {hidden.shape[-1]}: not the whole matrix")
        total = hidden.new_zeros((), dtype=torch.float32)
        for start in range(0, hidden.shape[0], CHUNK):
            logits = F.linear(hidden[start:start + CHUNK], weight, bias).float()
            total = total + F.cross_entropy(logits, target[start:start + CHUNK], reduction="sum")
        return total / hidden.shape[0]


def install(monkeypatch=None) -> None:
    """Make `engine.fused_loss: true` resolve and build with the stand-in, in this process (undone
    after the test when pytest's `monkeypatch` is given; a worker process just ends)."""
    from langadapt.planning import training as settings

    package = types.ModuleType("liger_kernel")
    transformers = types.ModuleType("liger_kernel.transformers")
    transformers.LigerFusedLinearCrossEntropyLoss = LigerFusedLinearCrossEntropyLoss  # type: ignore[attr-defined]
    package.transformers = transformers  # type: ignore[attr-defined]
    set_item = monkeypatch.setitem if monkeypatch else (lambda mapping, key, value: mapping.__setitem__(key, value))
    set_attr = monkeypatch.setattr if monkeypatch else setattr
    set_item(sys.modules, "liger_kernel", package)
    set_item(sys.modules, "liger_kernel.transformers", transformers)
    set_attr(settings, "liger_available", lambda: True)
    set_attr(settings, "fused_loss_runs_on", lambda device_type: True)
