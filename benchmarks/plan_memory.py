"""`langadapt plan`'s memory per GPU against what training allocates, per engine and stage, on CPU.

On a GPU, train_throughput.py compares the plan with `torch.cuda.max_memory_allocated`. Without
one, this measures the same quantity on CPU: the peak of bytes held by live tensors (PyTorch's
profiler memory timeline, which counts a tensor's bytes when it is allocated, touched or not, as
the CUDA allocator does; RSS would miss DeepSpeed's untouched bucket buffers). Each side runs in
its own process: the engine built around a fresh model (`build_engine`), then STEPS optimizer
steps in bf16, as on a GPU. Measured = the peak during the steps (the running total starts when
the model is created, so it holds the model states the build left); the plan is
`planning.memory.memory_per_gpu` for one GPU. The build's own transient (the fp32 model beside
its bf16 copy on CPU, where a GPU only ever receives the bf16 one) is left out.

What CPU cannot show: CUDA context, NCCL buffers and allocator fragmentation (the plan leaves
them out too), and fused or compiled kernels (off on CPU, so the plan is asked without them).

    python benchmarks/plan_memory.py              # every side, a table, the JSON last line
    python benchmarks/plan_memory.py --sides zero2:stage2
    python benchmarks/plan_memory.py --smoke      # seconds: the torch engine's stage 1 on a 2-layer model (CI)

`--smoke` measures zero0:stage1 (the torch engine, frozen body) on a tiny Llama (vocab 1024, hidden 64, seq 64):
it checks the script still runs; its ratios mean little at that size (the plan's fixed terms dominate).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHAPE = {"vocab_size": 32768, "hidden": 512, "layers": 8, "intermediate_size": 1376}
"""A small Llama with a real vocabulary (embeddings and head ~57% of 59M parameters)."""
SEQ, MICRO, STEPS = 512, 2, 2
SMOKE_SHAPE = {"vocab_size": 1024, "hidden": 64, "layers": 2, "intermediate_size": 128}
SMOKE_SEQ = 64
SMOKE_SIDES = ["zero0:stage1"]
"""One side (each is a process of its own, ~5 s of imports): the frozen body, the plan's harder case."""
SIDES = [f"{layout}:{stage}" for layout in ("zero0", "zero1", "zero2", "zero3", "fsdp") for stage in ("stage2", "stage1")]
"""layout (zero0: the torch engine; zero1-3: DeepSpeed; fsdp: FSDP2) and stage (stage1: frozen body)."""


def peak_bytes(prof) -> int:
    """The peak of bytes held by tensors allocated since profiling first began in this process:
    the running total the profiler attaches to every allocation and free (what its memory
    timeline is built from, without the stack-walking analysis that took minutes per side). The
    total carries over from one profiler session to the next."""
    from torch._C._profiler import _EventType

    def walk(nodes):
        for node in nodes:
            yield node
            yield from walk(node.children)

    totals = [n.extra_fields.total_allocated for n in walk(prof.profiler.kineto_results.experimental_event_tree())
              if n.tag == _EventType.Allocation]
    return max(totals, default=0)


def measure(side: str, shape: dict[str, int] = SHAPE, seq: int = SEQ) -> dict[str, float]:
    """In this process: build the side's engine, train STEPS steps, return measured and planned GB."""
    import torch
    from helpers.synthetic import SyntheticStream, tiny_llama
    from torch.profiler import ProfilerActivity, profile

    from langadapt.planning.memory import memory_per_gpu
    from langadapt.planning.models import dims_from_config
    from langadapt.recipe.train import EngineConfig, OptimizerConfig, TrainStageConfig
    from langadapt.runtime.distributed import DistInfo
    from langadapt.train.engines import base, build_engine
    from langadapt.train.job import TrainingJob
    from langadapt.train.policy import select_trainable

    # The optimizer as a GPU runs it: build_optimizer picks the fused AdamW there, and foreach on CPU
    # (see its comment), whose full-size temporaries (8 bytes per trainable parameter at the step)
    # no GPU run holds.
    foreach_init = base.SkippableAdamW.__init__
    base.SkippableAdamW.__init__ = lambda self, *a, **kw: foreach_init(self, *a, **{**kw, "fused": True})
    layout, stage_name = side.split(":")
    planned_layout = "fsdp" if layout == "fsdp" else int(layout[-1])  # memory_per_gpu's name for it
    kind = "fsdp" if layout == "fsdp" else "deepspeed" if planned_layout else "torch"
    zero = planned_layout if kind == "deepspeed" else 0
    stage = TrainStageConfig(steps=STEPS, micro_batch_size=MICRO, grad_accum_steps=1, seq_len=seq,
                             optimizer=OptimizerConfig(lr=1e-4))
    job = TrainingJob.resolve(stage, EngineConfig(kind=kind, zero_stage=zero, precision="bf16"), Path("unused"),
                              seed=0, stage_name=stage_name, dist=DistInfo.from_env())
    stream = SyntheticStream(shape["vocab_size"], seq, seed=0)
    activities = [ProfilerActivity.CPU]
    with profile(activities=activities, profile_memory=True):  # starts the running total before the model
        model = tiny_llama(vocab_size=shape["vocab_size"], hidden=shape["hidden"], layers=shape["layers"],
                           intermediate_size=shape["intermediate_size"])
        selection = select_trainable(model, stage.trainable_patterns(stage_name))
        engine = build_engine(model, selection, job)
    with engine, profile(activities=activities, profile_memory=True) as steps:
        for _ in range(STEPS):
            row = torch.from_numpy(stream.next_batch(MICRO))
            engine.micro_step(row[:, :-1], row[:, 1:])
            engine.step(lr=1e-4, skip=False)
    peak = peak_bytes(steps)  # includes the model states the build left
    dims = dims_from_config(model.config.to_dict())
    planned = memory_per_gpu(dims, planned_layout, 1, seq, MICRO,
                             "all" if stage_name == "stage2" else "embeddings", "flash", fused_loss=False)
    return {"measured_gb": peak / 1e9, "planned_gb": planned["total"],
            "planned_states_gb": planned["weights"] + planned["gradients"] + planned["optimizer"],
            "planned_buffers_gb": planned["buffers"], "planned_activations_gb": planned["activations"]}


def run_side(side: str, smoke: bool = False, seq: int | None = None) -> dict[str, float] | str:
    """One side in a fresh process (no allocator state or DeepSpeed globals shared between sides).
    `seq`: another sequence length than SEQ (the test's shorter one; the plan is asked for the same)."""
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "2",
           "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}  # tests/: helpers.synthetic
    done = subprocess.run([sys.executable, __file__, "--worker", side, *(["--smoke"] if smoke else []),
                           *(["--seq", str(seq)] if seq else [])],
                          capture_output=True, text=True, env=env, check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        return f"failed ({done.returncode}): {(done.stderr.strip().splitlines() or ['?'])[-1]}"
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sides", nargs="+", default=SIDES, choices=SIDES)
    parser.add_argument("--worker", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--seq", type=int, help=f"sequence length (default {SEQ}; smoke {SMOKE_SEQ})")
    parser.add_argument("--smoke", action="store_true",
                        help="the torch engine's stage 1 on a tiny model: the script's path in seconds (CI)")
    args = parser.parse_args()
    shape, seq = (SMOKE_SHAPE, SMOKE_SEQ) if args.smoke else (SHAPE, SEQ)
    seq = args.seq or seq
    if args.worker:
        print(json.dumps(measure(args.worker, shape, seq)))
        return
    if args.smoke:
        args.sides = SMOKE_SIDES
    results = {side: run_side(side, args.smoke, args.seq) for side in args.sides}
    print(f"{'side':<14} {'measured GB':>11} {'planned GB':>10} {'ratio':>6}   plan: states + buffers + activations")
    ratios = {}
    for side, r in results.items():
        if isinstance(r, str):
            print(f"{side:<14} {r}")
            continue
        ratios[side] = r["measured_gb"] / r["planned_gb"]
        print(f"{side:<14} {r['measured_gb']:>11.3f} {r['planned_gb']:>10.3f} {ratios[side]:>6.2f}   "
              f"{r['planned_states_gb']:.3f} + {r['planned_buffers_gb']:.3f} + {r['planned_activations_gb']:.3f}")
    worst = max(ratios.values(), key=lambda x: abs(x - 1), default=None)
    print(json.dumps({"benchmark": "plan_memory", "metric": "measured_over_planned_peak", "value": worst,
                      "baseline": None, "ratio": worst, "unit": "ratio", "device": "cpu",
                      "shape": shape, "seq": seq, "micro": MICRO,
                      "sides": {s: round(v, 3) for s, v in ratios.items()},
                      "measured_gb": {s: round(r["measured_gb"], 3) for s, r in results.items() if not isinstance(r, str)},
                      "planned_gb": {s: round(r["planned_gb"], 3) for s, r in results.items() if not isinstance(r, str)}}))


if __name__ == "__main__":
    main()
