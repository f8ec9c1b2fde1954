"""Every GPU default that has not run on a GPU since it changed (issue 32), in one short run.

- Each (fast path, layout) pair that `engine.compile/fused_loss: auto` leaves off because RAN_ON_GPU
  lacks it (`helpers.gpu_suite.GPU_TEST_FOR`: the fused loss under ZeRO-3, compile and the fused loss under
  FSDP2), forced on and compared with the plain path in bf16: losses within bf16 rounding at every
  step, every weight finite and close, the fused kernel called every micro-step / dynamo's graphs
  compiled without a break.
- DeepSpeed bf16 with its fp32 gradient accumulation and communication (ZeRO-1/2/3) against the
  torch engine, and the accumulated gradient against the exact float64 mean of its micro-gradients.
- DDP's gradients as views into its buckets (gradient_as_bucket_view), on 2 ranks.

The bodies are tests/helpers/fast_paths.py, which tests/train/test_fast_paths_cpu.py (and the DDP
and precision tests of tests/train) run on CPU in the normal suite. One GPU gives one rank to the
in-process runs (ZeRO-3's and FSDP2's partition and gather hooks all run; no cross-rank reduction)
and 2 gloo ranks sharing it to DDP. Estimated cost on an H100: ~2 min in all (see run.sh).
When one passes, add its RAN_ON_GPU entry (langadapt/planning/gpu_record.py) with the RESULTS.md section
and move its pair from GPU_TEST_FOR to RECORDED_BY (tests/helpers/gpu_suite.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import fast_paths
from helpers.gpu_suite import FORCED_ON_GPU


@pytest.mark.parametrize(("path", "layout"), sorted(FORCED_ON_GPU), ids=lambda v: v)
def test_forced_fast_path_on_gpu_trains_as_the_plain_path(path: str, layout: str, tmp_path: Path,
                                                           monkeypatch) -> None:
    worst = fast_paths.check_fast_path(path, layout, tmp_path, monkeypatch)
    print(f"{path} under {layout}: worst relative differences {worst}")


@pytest.mark.parametrize("zero", [1, 2, 3], ids=str)
def test_deepspeed_bf16_on_gpu_trains_as_the_torch_engine(zero: int, tmp_path: Path) -> None:
    worst = fast_paths.check_deepspeed_bf16_matches_torch(zero, tmp_path)
    print(f"DeepSpeed ZeRO-{zero} bf16 vs torch: worst relative differences {worst}")


@pytest.mark.parametrize("zero", [1, 2, 3], ids=str)
def test_deepspeed_bf16_gradients_on_gpu_are_exact(zero: int, tmp_path: Path) -> None:
    print(f"ZeRO-{zero} gradient distances from the exact mean: {fast_paths.check_deepspeed_bf16_gradients_are_exact(zero, tmp_path)}")


def test_ddp_gradients_on_gpu_are_bucket_views(tmp_path: Path) -> None:
    print(f"DDP on 2 ranks: {fast_paths.check_ddp_gradients_are_bucket_views(tmp_path)}")
