"""The gradient DeepSpeed hands the optimizer under bf16, against the exact sum of its micro-steps.

    torchrun --nproc_per_node 2 grad_accum_worker.py OUT --zero 2

On each rank, three DeepSpeed engines (langadapt's, built by `build_engine`) see the same
MICRO_STEPS micro-batches of a tiny Llama in bf16, at lr 0 so the weights never move:
  - "exact":   one micro-step per optimizer step; each step's gradient (reduced over the ranks) is
               read with `deepspeed.utils.safe_get_full_grad` and summed in float64;
  - "default": all micro-steps accumulated into one step, as langadapt configures DeepSpeed;
  - "bf16":    the same, with DeepSpeed's own bf16 accumulation and reduction put back through
               `engine.deepspeed_config` (what a user who opts out for speed gets).
DeepSpeed divides each micro-step's loss by the accumulation count, a power of two here, so the
accumulated runs' micro-gradients are the exact ones scaled exactly; only accumulation and
reduction rounding can separate them. Rank 0 writes OUT/errors.json: the relative norm distance
of each accumulated gradient from the exact mean, over all parameters.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

if not __package__:  # run as a script (torchrun, srun): sys.path[0] is tests/helpers; `helpers` is in tests/
    sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from helpers.synthetic import SyntheticStream, tiny_llama
from langadapt.recipe.train import EngineConfig, OptimizerConfig, TrainStageConfig
from langadapt.runtime.distributed import DistInfo
from langadapt.train.engines import build_engine
from langadapt.train.engines.deepspeed_json import BF16_GRADIENTS
from langadapt.train.job import TrainingJob
from langadapt.train.policy import select_trainable

VOCAB, SEQ, HIDDEN, MICRO_STEPS = 256, 32, 64, 16


def full_gradient(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter's whole gradient as this step reduced it (a collective under ZeRO-3)."""
    from deepspeed.utils import safe_get_full_grad

    return {name: safe_get_full_grad(p).double() for name, p in model.named_parameters()}


def gradient(zero: int, accum: int, raw: dict | None, dist: DistInfo) -> dict[str, torch.Tensor]:
    """The mean gradient over MICRO_STEPS micro-batches, `accum` of them per optimizer step."""
    model = tiny_llama(vocab_size=VOCAB, hidden=HIDDEN, layers=2, seed=0)
    stage = TrainStageConfig(steps=MICRO_STEPS // accum, micro_batch_size=1, grad_accum_steps=accum,
                             seq_len=SEQ, optimizer=OptimizerConfig(lr=1e-3, weight_decay=0.0), grad_clip=0.0)
    engine_config = EngineConfig(kind="deepspeed", zero_stage=zero, precision="bf16",
                                 attn_implementation="eager", deepspeed_config=raw)
    job = TrainingJob.resolve(stage, engine_config, Path("unused"), seed=0, stage_name="stage2", dist=dist)
    selection = select_trainable(model, stage.trainable_patterns("stage2"))
    stream = SyntheticStream(VOCAB, SEQ, seed=7)
    total: dict[str, torch.Tensor] = {}
    with build_engine(model, selection, job) as engine:
        for _ in range(MICRO_STEPS // accum):
            for _ in range(accum):
                row = torch.from_numpy(stream.next_batch(dist.world_size, dist.rank, dist.world_size))
                engine.micro_step(row[:, :-1], row[:, 1:])
            for name, grad in full_gradient(model).items():  # the boundary's gradient, before the step
                total[name] = total.get(name, 0) + grad
            engine.step(lr=0.0, skip=False)
    return {name: grad * accum / MICRO_STEPS for name, grad in total.items()}


def relative_distance(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    diff = sum(float((a[n] - b[n]).pow(2).sum()) for n in b)
    return (diff / sum(float(b[n].pow(2).sum()) for n in b)) ** 0.5


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--zero", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)  # two ranks share two cores
    dist = DistInfo.from_env()
    exact = gradient(args.zero, 1, None, dist)
    errors = {"default": relative_distance(gradient(args.zero, MICRO_STEPS, None, dist), exact),
              "bf16": relative_distance(gradient(args.zero, MICRO_STEPS, BF16_GRADIENTS, dist), exact)}
    if dist.rank == 0:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "errors.json").write_text(json.dumps(errors))


if __name__ == "__main__":
    main()
