"""Bodies shared by the GPU suite (tests/gpu/test_gpu_fast_paths.py) and its CPU twins
(tests/train/test_fast_paths_cpu.py): the same check runs on whatever device this machine has.

`fit` puts the model on `DistInfo.device()` (the GPU when one is visible, else the CPU), so a body
written once is a GPU check on a GPU machine and a CPU check everywhere else; only the kernels under
it differ. That is the point: a GPU test whose body has never run anywhere is a guess, one whose
body passes on CPU in the normal suite fails on a GPU only for a reason the GPU has.

On CPU the fused loss runs liger's stand-in (helpers/liger_stand_in.py; liger's Triton kernel needs
a GPU), on a GPU liger itself; either way its forward calls are counted, so a fused run that quietly
fell back to the plain loss fails. One process, one rank: on a single GPU that still runs every
ZeRO-3 partition/gather and FSDP2 shard/unshard hook (a one-rank mesh), but no reduction across ranks.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from helpers import multiproc as mp
from helpers.synthetic import SyntheticStream, tiny_llama
from langadapt.planning.gpu_record import layout_name
from langadapt.recipe.train import (
    CheckpointConfig,
    EngineConfig,
    OptimizerConfig,
    ScheduleConfig,
    TrainStageConfig,
)
from langadapt.train.job import TrainingJob
from langadapt.train.loop import fit

VOCAB, SEQ, HIDDEN, STEPS, LR = 256, 32, 64, 6, 1e-2

BF16_LOSS_RTOL = 1e-2
"""Fast vs plain path (or DeepSpeed vs torch), both bf16, at every step: a quarter of what the six
steps lower the loss (5.56 -> 5.34). Measured on CPU: at most 2.1e-3 (compile under FSDP2: inductor
fuses the norms in another precision), 1.0e-3 DeepSpeed vs torch, 5.6e-4 the fused loss; GPU kernels
round in other orders again (liger's chunked kernel, inductor's Triton), hence the margin."""

UPDATE_RTOL = 0.5
"""Each tensor's training update on the two paths, |fast - plain| / |plain - initial| (norms). AdamW
divides by sqrt(v), so an element with a near-zero gradient turns rounding into an lr-sized step and
bf16 runs drift apart elementwise; over a whole tensor they agree. Measured on CPU: at most 0.15
(compile under FSDP2; DeepSpeed's bf16 weights vs torch's fp32 ones 0.14). A tensor whose gradient
is lost gives exactly 1, one with a wrong gradient about that or more."""


def engine_for(layout: str, **settings: object) -> EngineConfig:
    """The engine of a `gpu_suite.FAST_PATH_LAYOUTS` name, bf16, every ZeRO-3 tensor partitioned (by default
    ZeRO-3 keeps tensors under 100k elements whole: all of this tiny model's)."""
    kind = layout.split("-")[0]
    zero = int(layout.removeprefix("deepspeed-zero")) if kind == "deepspeed" else 0
    raw = {"zero_optimization": {"stage3_param_persistence_threshold": 0}} if zero == 3 else None
    engine = EngineConfig(kind=kind, zero_stage=zero, precision="bf16", attn_implementation="eager",
                          deepspeed_config=raw, **settings)
    assert layout_name(kind, zero) == layout
    return engine


@dataclass(frozen=True)
class Trained:
    losses: list[float]
    weights: dict[str, torch.Tensor]


def train(out: Path, engine: EngineConfig, grad_accum_steps: int = 2) -> Trained:
    """STEPS optimizer steps of a tiny Llama through the real loop, in this process."""
    config = TrainStageConfig(steps=STEPS, micro_batch_size=4, grad_accum_steps=grad_accum_steps, seq_len=SEQ,
                              log_every=1, optimizer=OptimizerConfig(lr=LR), schedule=ScheduleConfig(warmup_steps=1),
                              checkpoint=CheckpointConfig(every_steps=None))
    lone = not torch.distributed.is_initialized()
    fit(tiny_llama(VOCAB, hidden=HIDDEN, layers=2, seed=0), SyntheticStream(VOCAB, SEQ, seed=7),
        TrainingJob.resolve(config, engine, out, seed=0, stage_name="stage2"))
    if lone and engine.kind == "fsdp":
        # FSDP2 gave this lone process a one-rank group on an in-memory store without the env://
        # variables DeepSpeed reads (LOCAL_RANK); a DeepSpeed run later in this pytest process
        # (these bodies, tests/gpu/test_gpu_kernels.py) must start its own. A recipe has one
        # engine.kind, so a real run never meets both in one process.
        torch.distributed.destroy_process_group()
    losses = mp.losses(out)
    return Trained([losses[step] for step in sorted(losses)], mp.weights(out))


def count_fused_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the fused loss's forward calls from now on (one per micro-step when it is used).

    On CPU liger's stand-in is installed first; on a GPU liger must be installed (skipped otherwise,
    with the reason): `run.sh` installs the `gpu` extra."""
    if torch.cuda.is_available():
        pytest.importorskip("liger_kernel.transformers", reason="liger-kernel is not installed: pip install '.[gpu]'")
    else:
        from helpers import liger_stand_in

        liger_stand_in.install(monkeypatch)
    module = sys.modules["liger_kernel.transformers"]
    calls = [0]

    class Counted(module.LigerFusedLinearCrossEntropyLoss):  # type: ignore[name-defined,misc]
        def forward(self, *args: object, **kwargs: object) -> torch.Tensor:
            calls[0] += 1
            return super().forward(*args, **kwargs)

    monkeypatch.setattr(module, "LigerFusedLinearCrossEntropyLoss", Counted)
    return calls


def compiled_graphs() -> tuple[int, int]:
    """(graphs dynamo compiled, graph breaks) since dynamo's counters were last cleared."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())


def assert_close_and_finite(fast: Trained, plain: Trained, what: str) -> dict[str, float]:
    """Losses within bf16 rounding of each other at every step, every weight finite and each tensor's
    update the same; returns the worst relative differences of losses and updates (the tests print them)."""
    assert len(fast.losses) == len(plain.losses) == STEPS, (fast.losses, plain.losses)
    assert all(math.isfinite(x) for x in fast.losses), f"{what}: non-finite loss {fast.losses}"
    worst = max(abs(a - b) / abs(b) for a, b in zip(fast.losses, plain.losses))
    assert worst <= BF16_LOSS_RTOL, f"{what}: loss relative difference {worst:.2e}: {fast.losses} vs {plain.losses}"
    assert fast.weights.keys() == plain.weights.keys()
    initial = tiny_llama(VOCAB, hidden=HIDDEN, layers=2, seed=0).state_dict()
    worst_update = 0.0
    for name, weight in fast.weights.items():
        # finite weights after AdamW steps: every gradient that reached them was finite too
        assert torch.isfinite(weight).all(), f"{what}: {name} has non-finite values"
        update = (plain.weights[name].float() - initial[name]).norm().item()
        gap = (weight.float() - plain.weights[name].float()).norm().item()
        assert gap <= UPDATE_RTOL * update, f"{what}: {name}'s update differs by {gap / update:.2f} of its size"
        worst_update = max(worst_update, gap / update)
    assert fast.losses[-1] < fast.losses[0], f"{what}: did not train: {fast.losses}"
    return {"loss": worst, "update": worst_update}


def check_fast_path(path: str, layout: str, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, float]:
    """`engine.<path>: true` (the other fast path off) under `layout` trains as the plain path does,
    and really ran: the fused loss was called every micro-step, or dynamo compiled the blocks."""
    calls = count_fused_calls(monkeypatch) if path == "fused_loss" else None
    plain = train(tmp / "plain", engine_for(layout, compile=False, fused_loss=False))
    torch._dynamo.reset()
    from torch._dynamo.utils import counters

    counters.clear()
    fast = train(tmp / path, engine_for(layout, **{"compile": False, "fused_loss": False, path: True}))
    if calls is not None:
        assert calls[0] == STEPS * 2, f"the fused loss ran {calls[0]} times, not once per micro-step"
    else:
        graphs, breaks = compiled_graphs()
        assert graphs >= 1, f"{layout}: engine.compile: true compiled nothing"
        assert breaks == 0, f"{layout}: {breaks} graph breaks in the compiled blocks"
    return assert_close_and_finite(fast, plain, f"{path} under {layout}")


def check_deepspeed_bf16_matches_torch(zero: int, tmp: Path) -> dict[str, float]:
    """DeepSpeed bf16 as langadapt configures it (gradients accumulated and reduced in fp32:
    `deepspeed_json.FP32_GRADIENTS`) trains as the torch engine's bf16 autocast over fp32 weights,
    with 4 micro-steps accumulated per step so the accumulation dtype matters. Fast paths off on
    both: this compares the engines' precision, not the kernels."""
    layout = f"deepspeed-zero{zero}"
    torch_run = train(tmp / "torch", engine_for("torch", compile=False, fused_loss=False), grad_accum_steps=4)
    ds_run = train(tmp / layout, engine_for(layout, compile=False, fused_loss=False), grad_accum_steps=4)
    return assert_close_and_finite(ds_run, torch_run, f"DeepSpeed bf16 {layout} vs the torch engine")


def check_ddp_gradients_are_bucket_views(tmp: Path) -> dict:
    """The torch engine's DDP on 2 ranks (helpers/ddp_worker.py) keeps its gradients as views into
    its one all-reduce bucket (`gradient_as_bucket_view`), also after `zero_grad(set_to_none=True)`.

    With fewer than 2 GPUs both ranks share the one device (or the CPU) over gloo: NCCL refuses two
    ranks on one GPU, gloo all-reduces CUDA tensors too, and where the gradients live is DDP's
    doing, not the backend's."""
    out = tmp / "ddp"
    env = {} if torch.cuda.device_count() >= 2 else {"LANGADAPT_DIST_BACKEND": "gloo"}
    mp.two_ranks(out, worker=mp.HELPERS / "ddp_worker.py", extra_env=env)
    result = json.loads((out / "storages.json").read_text())
    assert result["params"] == 21
    assert result["storages"] == [1, 1], result  # one bucket (25 MB cap), after both steps' backward
    # the losses DDP's copy-keeping default gave (the second step reads the first step's update);
    # 2e-3: CPU kernels differ slightly across instruction sets, as for the golden files
    assert result["losses"] == pytest.approx([9.1203, 9.1895], abs=2e-3)
    return result


def check_deepspeed_bf16_gradients_are_exact(zero: int, tmp: Path) -> dict[str, float]:
    """The gradient DeepSpeed bf16 hands its optimizer after 16 accumulated micro-steps equals the
    float64 mean of the same micro-gradients to fp32 rounding (helpers/grad_accum_worker.py), and
    DeepSpeed's own bf16 accumulation, put back through engine.deepspeed_config, is far off (so the
    check can tell them apart). 2 ranks on CPU; on a GPU machine one rank per GPU (nproc 1 on one
    GPU: the fp32 accumulation buffers run, the fp32 reduction has no peer)."""
    out = tmp / "grads"
    nproc = min(torch.cuda.device_count(), 2) if torch.cuda.is_available() else 2
    mp.run(mp.torchrun_cmd(out, "--zero", str(zero), nproc=nproc, worker=mp.HELPERS / "grad_accum_worker.py"),
           out.with_suffix(".log"))
    errors = json.loads((out / "errors.json").read_text())
    assert errors["default"] < 1e-6, errors  # measured 2.7e-9 on CPU: fp32 sums of bf16 values
    assert errors["bf16"] > 1e-4, errors  # measured 4.2e-3 (ZeRO-1) and 4.3e-3 (ZeRO-2/3) on CPU
    return errors
