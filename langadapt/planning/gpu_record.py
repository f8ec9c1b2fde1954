"""Which GPU fast paths have run on a GPU: what `engine.compile: auto` / `fused_loss: auto` may turn on.

A fast path changes numerics and memory in ways CPU tests cannot show (Triton kernels, compiled
graphs around DeepSpeed's or FSDP2's hooks). So auto enables one only for the engine layouts the GPU
suite has run it under, as recorded in tests/gpu/RESULTS.md (device, date, versions); everywhere
else auto leaves it off and says why, and `true` opts in.

Only what auto reads ships here: the (fast path, layout) pairs and the RESULTS.md section each
rests on. Which GPU test recorded each pair, and which test settles each pair not here, are the
test suite's (tests/helpers/gpu_suite.py); tests/planning/test_gpu_record.py checks every entry
below against RESULTS.md, so this table cannot claim a run the record does not hold. After
`bash tests/gpu/run.sh`, for each of its forcing tests that passed, add the pair here with the new
RESULTS.md section, and move the pair from `GPU_TEST_FOR` to `RECORDED_BY` in gpu_suite.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FastPath = Literal["compile", "fused_loss"]


@dataclass(frozen=True)
class GpuRun:
    """One passing run of the GPU suite (a section of tests/gpu/RESULTS.md)."""

    section: str
    """The section's heading: date and device, e.g. "2026-11-23 01:13 UTC, NVIDIA H100 80GB HBM3"."""
    versions: str
    """What ran (torch, DeepSpeed, liger-kernel), as the section's first line says."""


def layout_name(kind: str, zero_stage: int) -> str:
    """"torch", "deepspeed-zero2", "fsdp": the engine layouts a fast path is recorded under."""
    return f"deepspeed-zero{zero_stage}" if kind == "deepspeed" else kind


_H100_1122 = "2026-11-22 19:02 UTC, NVIDIA H100 80GB HBM3"
_H100_1123 = "2026-11-23 01:13 UTC, NVIDIA H100 80GB HBM3"
_H200_1128 = "2026-11-28 16:19 UTC, NVIDIA H200"
_VERSIONS = "torch 2.11.0+cu130 (CUDA 13.0, HIP None), transformers 5.17.0, deepspeed 0.19.8, liger-kernel 0.8.5"

RAN_ON_GPU: dict[tuple[FastPath, str], GpuRun] = {
    ("compile", "torch"): GpuRun(_H100_1123, _VERSIONS),
    ("fused_loss", "torch"): GpuRun(_H100_1123, _VERSIONS),
    ("compile", "deepspeed-zero1"): GpuRun(_H100_1122, _VERSIONS),
    ("fused_loss", "deepspeed-zero1"): GpuRun(_H100_1122, _VERSIONS),
    ("compile", "deepspeed-zero2"): GpuRun(_H100_1122, _VERSIONS),
    ("fused_loss", "deepspeed-zero2"): GpuRun(_H100_1122, _VERSIONS),
    ("compile", "deepspeed-zero3"): GpuRun(_H100_1123, _VERSIONS),
    # Forced on and compared with the plain path in bf16 (tests/gpu/test_gpu_fast_paths.py, one rank).
    ("fused_loss", "deepspeed-zero3"): GpuRun(_H200_1128, _VERSIONS),
    ("compile", "fsdp"): GpuRun(_H200_1128, _VERSIONS),
    ("fused_loss", "fsdp"): GpuRun(_H200_1128, _VERSIONS),
}
"""(fast path, layout) -> the GPU run that recorded it passing. FSDP2's and ZeRO-3's ran on one rank only:
their partition and gather hooks ran, no cross-rank reduction did."""


def ran_on_gpu(path: FastPath, kind: str, zero_stage: int) -> GpuRun | None:
    """The recorded GPU run of `path` under this engine layout, or None when it has never run."""
    return RAN_ON_GPU.get((path, layout_name(kind, zero_stage)))
