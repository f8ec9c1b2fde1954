"""The GPU suite's test names behind langadapt/planning/gpu_record.py: which test recorded each fast
path auto turns on, and which test settles each one it leaves off.

Test support, not shipped (issue 39: only runtime code ships): `auto` reads only which (fast path,
layout) pairs have run and in which tests/gpu/RESULTS.md section (`gpu_record.RAN_ON_GPU`); the
pytest node names are what tests/planning/test_gpu_record.py matches against RESULTS.md, and what
tests/gpu/test_gpu_fast_paths.py and its CPU twin tests/train/test_fast_paths_cpu.py parametrize
over. Three test folders share them, so they live in tests/helpers/.
"""

from __future__ import annotations

from langadapt.planning.gpu_record import RAN_ON_GPU

FAST_PATH_LAYOUTS = ("torch", "deepspeed-zero1", "deepspeed-zero2", "deepspeed-zero3", "fsdp")
"""Every layout a fast path can run under (`gpu_record.layout_name`'s values)."""

_ZERO = "test_deepspeed_zero_on_gpu_matches_the_torch_engine[stage2-{zero}]"

RECORDED_BY: dict[tuple[str, str], str] = {
    ("compile", "torch"): "test_demo_matches_the_cpu_run[torch_run]",
    ("fused_loss", "torch"): "test_demo_matches_the_cpu_run[torch_run]",
    ("compile", "deepspeed-zero1"): _ZERO.format(zero=1),
    ("fused_loss", "deepspeed-zero1"): _ZERO.format(zero=1),
    ("compile", "deepspeed-zero2"): _ZERO.format(zero=2),
    ("fused_loss", "deepspeed-zero2"): _ZERO.format(zero=2),
    ("compile", "deepspeed-zero3"): "test_demo_matches_the_cpu_run[deepspeed_run]",
}
"""(fast path, layout) of `gpu_record.RAN_ON_GPU` -> the passing test of its RESULTS.md section that ran it."""

_FORCED = "test_forced_fast_path_on_gpu_trains_as_the_plain_path[{path}-{layout}]"

FORCED_ON_GPU: tuple[tuple[str, str], ...] = (("fused_loss", "deepspeed-zero3"), ("compile", "fsdp"), ("fused_loss", "fsdp"))
"""The (fast path, layout) pairs tests/gpu/test_gpu_fast_paths.py forces on and compares with the plain
path (and tests/train/test_fast_paths_cpu.py on CPU): the pairs whose first GPU run was that test. They
stay in the suite after they pass, so the next torch or DeepSpeed version is checked the same way."""

RECORDED_BY.update({pair: _FORCED.format(path=pair[0], layout=pair[1]) for pair in FORCED_ON_GPU
                    if pair in RAN_ON_GPU})

GPU_TEST_FOR: dict[tuple[str, str], str] = {
    pair: _FORCED.format(path=pair[0], layout=pair[1]) for pair in FORCED_ON_GPU if pair not in RAN_ON_GPU}
"""(fast path, layout) -> the tests/gpu test (as RESULTS.md names it) that forces it on, for the pairs that
have never run on a GPU (empty since the H200 run of 2026-11-28: every pair has run)."""

GPU_DEFAULT_TESTS: dict[str, tuple[str, ...]] = {
    "DeepSpeed bf16 accumulates and reduces gradients in fp32 (engines.deepspeed_json.FP32_GRADIENTS)": (
        *(f"test_deepspeed_bf16_on_gpu_trains_as_the_torch_engine[{zero}]" for zero in (1, 2, 3)),
        *(f"test_deepspeed_bf16_gradients_on_gpu_are_exact[{zero}]" for zero in (1, 2, 3))),
    "DDP keeps its gradients as views into its buckets (engines.torch_engine, gradient_as_bucket_view)": (
        "test_ddp_gradients_on_gpu_are_bucket_views",),
}
"""The other GPU defaults that changed without a GPU run (issue 32), and the tests/gpu tests that check them
(all passed on an H200, tests/gpu/RESULTS.md 2026-11-28 16:19 and 16:25 UTC). Not gated like the fast
paths (they are how the engines are built, not an optional kernel)."""
