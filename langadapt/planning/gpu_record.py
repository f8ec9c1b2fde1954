"""Which GPU fast paths have run on a GPU: what `engine.compile: auto` / `fused_loss: auto` may turn on.

A fast path changes numerics and memory in ways CPU tests cannot show (Triton kernels, compiled
graphs around DeepSpeed's or FSDP2's hooks). So auto enables one only for the engine layouts the GPU
suite has run it under, as recorded in tests/gpu/RESULTS.md (device, date, versions, the passing
test); everywhere else auto leaves it off and says why, and `true` opts in. A test checks every
entry below against RESULTS.md, so this table cannot claim a run the record does not hold.

Every (fast path, layout) pair not in RAN_ON_GPU has a GPU test in GPU_TEST_FOR that forces it on
(a test checks that each pair is in one table or the other, and that each named test exists), so
one run of `bash tests/gpu/run.sh` settles them all: for each of its tests that passed, add a
RAN_ON_GPU entry naming the new RESULTS.md section and that test.
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
    test: str
    """The passing test that ran this fast path under this layout."""


def layout_name(kind: str, zero_stage: int) -> str:
    """"torch", "deepspeed-zero2", "fsdp": the engine layouts a fast path is recorded under."""
    return f"deepspeed-zero{zero_stage}" if kind == "deepspeed" else kind


FAST_PATH_LAYOUTS = ("torch", "deepspeed-zero1", "deepspeed-zero2", "deepspeed-zero3", "fsdp")
"""Every layout a fast path can run under."""

_H100_1122 = "2026-11-22 19:02 UTC, NVIDIA H100 80GB HBM3"
_H100_1123 = "2026-11-23 01:13 UTC, NVIDIA H100 80GB HBM3"
_VERSIONS = "torch 2.11.0+cu130 (CUDA 13.0, HIP None), transformers 5.17.0, deepspeed 0.19.8, liger-kernel 0.8.5"
_ZERO = "test_deepspeed_zero_on_gpu_matches_the_torch_engine[stage2-{zero}]"

RAN_ON_GPU: dict[tuple[FastPath, str], GpuRun] = {
    ("compile", "torch"): GpuRun(_H100_1123, _VERSIONS, "test_demo_matches_the_cpu_run[torch_run]"),
    ("fused_loss", "torch"): GpuRun(_H100_1123, _VERSIONS, "test_demo_matches_the_cpu_run[torch_run]"),
    ("compile", "deepspeed-zero1"): GpuRun(_H100_1122, _VERSIONS, _ZERO.format(zero=1)),
    ("fused_loss", "deepspeed-zero1"): GpuRun(_H100_1122, _VERSIONS, _ZERO.format(zero=1)),
    ("compile", "deepspeed-zero2"): GpuRun(_H100_1122, _VERSIONS, _ZERO.format(zero=2)),
    ("fused_loss", "deepspeed-zero2"): GpuRun(_H100_1122, _VERSIONS, _ZERO.format(zero=2)),
    # The fused loss was off under ZeRO-3 when these ran; it is CPU-tested only (a stand-in kernel).
    ("compile", "deepspeed-zero3"): GpuRun(_H100_1123, _VERSIONS, "test_demo_matches_the_cpu_run[deepspeed_run]"),
}
"""(fast path, layout) -> the GPU run that recorded it passing. FSDP2 has never run on a GPU."""


_FORCED = "test_forced_fast_path_on_gpu_trains_as_the_plain_path[{path}-{layout}]"

GPU_TEST_FOR: dict[tuple[FastPath, str], str] = {
    (path, layout): _FORCED.format(path=path, layout=layout)
    for path, layout in (("fused_loss", "deepspeed-zero3"), ("compile", "fsdp"), ("fused_loss", "fsdp"))
}
"""(fast path, layout) -> the tests/gpu test (as RESULTS.md names it) that forces it on and compares it with
the plain path, for the pairs that have never run on a GPU; its CPU twin is tests/train/test_fast_paths_cpu.py."""

GPU_DEFAULT_TESTS: dict[str, tuple[str, ...]] = {
    "DeepSpeed bf16 accumulates and reduces gradients in fp32 (engines.deepspeed_engine.FP32_GRADIENTS)": (
        *(f"test_deepspeed_bf16_on_gpu_trains_as_the_torch_engine[{zero}]" for zero in (1, 2, 3)),
        *(f"test_deepspeed_bf16_gradients_on_gpu_are_exact[{zero}]" for zero in (1, 2, 3))),
    "DDP keeps its gradients as views into its buckets (engines.torch_engine, gradient_as_bucket_view)": (
        "test_ddp_gradients_on_gpu_are_bucket_views",),
}
"""The other GPU defaults that changed without a GPU run (issue 32), and the tests/gpu tests that check them.
Not gated like the fast paths (they are how the engines are built, not an optional kernel)."""


def ran_on_gpu(path: FastPath, kind: str, zero_stage: int) -> GpuRun | None:
    """The recorded GPU run of `path` under this engine layout, or None when it has never run."""
    return RAN_ON_GPU.get((path, layout_name(kind, zero_stage)))
