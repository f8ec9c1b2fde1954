"""The GPU suite's fast-path checks (tests/gpu/test_gpu_fast_paths.py) run on CPU: the same bodies
(tests/helpers/fast_paths.py), so the logic of every GPU check is verified in the normal suite and
only the device differs on a GPU. What CPU cannot show is the kernels: liger's Triton kernel (a
stand-in with its access pattern runs here), inductor's GPU code, NCCL.

Each case is one (fast path, engine layout) pair that auto leaves off on GPUs because it has not
run on one (`helpers.gpu_suite.GPU_TEST_FOR`), forced on with `engine.<path>: true` and
compared with the plain path in bf16; and DeepSpeed bf16's fp32 gradients against the torch engine.
The DDP bucket-view and exact-gradient twins are tests/train/test_train_ddp_buckets.py and
tests/train/test_train_deepspeed_precision.py (same bodies, 2 CPU ranks).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import fast_paths
from helpers.gpu_suite import FORCED_ON_GPU

SLOW = pytest.mark.slow  # a DeepSpeed or FSDP2 setup each, and compile: 8-25 s per case on 2 cores


@SLOW
@pytest.mark.parametrize(("path", "layout"), sorted(FORCED_ON_GPU), ids=lambda v: v)
def test_forced_fast_path_trains_as_the_plain_path(path: str, layout: str, tmp_path: Path, monkeypatch) -> None:
    worst = fast_paths.check_fast_path(path, layout, tmp_path, monkeypatch)
    print(f"{path} under {layout}: worst relative differences {worst}")


@SLOW
@pytest.mark.parametrize("zero", [1, 2, 3])
def test_deepspeed_bf16_trains_as_the_torch_engine(zero: int, tmp_path: Path) -> None:
    worst = fast_paths.check_deepspeed_bf16_matches_torch(zero, tmp_path)
    print(f"DeepSpeed ZeRO-{zero} bf16 vs torch: worst relative differences {worst}")


def _trained(losses: list[float], scale: float = 1.0, untrained: str | None = None) -> fast_paths.Trained:
    """A run whose every tensor moved by `scale` x 0.01 from the initial weights (except `untrained`)."""
    initial = fast_paths.tiny_llama(fast_paths.VOCAB, hidden=fast_paths.HIDDEN, layers=2, seed=0).state_dict()
    moved = {name: w if name == untrained else w + 0.01 * scale for name, w in initial.items()}
    return fast_paths.Trained(losses, moved)


PLAIN = [5.56, 5.51, 5.39, 5.43, 5.50, 5.34]


def test_the_comparison_passes_bf16_rounding_and_fails_a_lost_gradient_or_another_loss() -> None:
    """The shared comparison can fail: what a GPU bug would look like is refused, rounding is not."""
    plain = _trained(PLAIN)
    worst = fast_paths.assert_close_and_finite(_trained([x * 1.002 for x in PLAIN], scale=1.1), plain, "ok")
    assert worst == pytest.approx({"loss": 2e-3, "update": 0.1}, rel=1e-3)
    with pytest.raises(AssertionError, match="lm_head.weight's update differs by 1.00"):
        fast_paths.assert_close_and_finite(_trained(PLAIN, untrained="lm_head.weight"), plain, "lost")
    with pytest.raises(AssertionError, match="loss relative difference 2.00e-02"):
        fast_paths.assert_close_and_finite(_trained([x * 1.02 for x in PLAIN]), plain, "off")
    nan = _trained(PLAIN)
    nan.weights["model.norm.weight"][0] = torch.nan
    with pytest.raises(AssertionError, match="model.norm.weight has non-finite values"):
        fast_paths.assert_close_and_finite(nan, plain, "nan")
    with pytest.raises(AssertionError, match="did not train"):
        fast_paths.assert_close_and_finite(_trained([5.56] * 6), _trained([5.56] * 6), "flat")
