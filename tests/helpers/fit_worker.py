"""One training stage through the real loop (`langadapt.train.loop.fit`), under any launcher.

    torchrun --nproc_per_node 2 fit_worker.py OUT --engine deepspeed --zero 2 --stage stage2
    torchrun --nproc_per_node 2 fit_worker.py OUT --engine fsdp --precision bf16 --activation-checkpointing

The tiny Llama and the synthetic stream come from `helpers.synthetic`: the same
initial weights on every rank, and row i of the data depends on i only, so runs with different
world sizes see the same global batches. `fit` itself picks up the rank layout from the
launcher's environment (DistInfo), resumes from OUT/checkpoints/latest when it exists, and
writes OUT/metrics.jsonl and OUT/model. This worker adds (rank 0):
    OUT/initial.pt          the weights before training (the frozen-tensor check compares with it)
    OUT/dist-<rank>.json    each rank's DistInfo, as it read it from its launcher
    OUT/result.json         fit's TrainResult (resumed_from: the step it resumed from, or null)
With --step-sleep each data fetch sleeps, so a test can kill the run at a step of its choice;
--hidden widens the model (a checkpoint that takes a while to write, for the kill-while-saving test);
--fused-stand-in trains with the fused loss, liger's kernel replaced by helpers/liger_stand_in.py;
--compile compiles the decoder blocks and writes OUT/compiled-<rank>.json (dynamo's graph breaks and graphs).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

if not __package__:  # run as a script (torchrun, srun): sys.path[0] is tests/helpers; `helpers` is in tests/
    sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from helpers.synthetic import SyntheticStream, tiny_llama
from langadapt.embeddings.row_plan import SharedRows
from langadapt.recipe.train import (
    CheckpointConfig,
    EngineConfig,
    OptimizerConfig,
    ScheduleConfig,
    TrainStageConfig,
)
from langadapt.runtime.distributed import DistInfo
from langadapt.train.job import TrainingJob
from langadapt.train.loop import fit

VOCAB, SEQ, GLOBAL_BATCH = 96, 16, 8
SHARED_ROWS = SharedRows(VOCAB, tuple(range(0, VOCAB, 2)))
"""With --train-rows new: the even rows play the ones copied from a base (both halves of a 2-rank shard)."""


class SlowStream(SyntheticStream):
    """The synthetic stream, sleeping before each batch (gives a killer time to aim)."""

    def __init__(self, *args, sleep: float = 0.0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.sleep = sleep

    def next_batch(self, global_batch_size: int, rank: int = 0, world_size: int = 1):
        time.sleep(self.sleep)
        return super().next_batch(global_batch_size, rank, world_size)


def train(out: Path, engine: str = "deepspeed", zero: int = 2, stage: str = "stage2", steps: int = 8,
          save_every: int | None = None, step_sleep: float = 0.0, hidden: int = 32, precision: str = "fp32",
          activation_checkpointing: bool = False, cpu_offload: bool = False, train_rows: str = "all",
          fused_stand_in: bool = False, compile: bool = False) -> None:
    """One `fit` in this process, on whatever ranks the environment describes (see module doc)."""
    dist = DistInfo.from_env()
    out.mkdir(parents=True, exist_ok=True)
    (out / f"dist-{dist.rank}.json").write_text(json.dumps(dataclasses.asdict(dist)))
    model = tiny_llama(vocab_size=VOCAB, hidden=hidden, layers=2, seed=0)
    if dist.rank == 0 and not (out / "initial.pt").exists():
        torch.save({k: v.clone() for k, v in model.state_dict().items()}, out / "initial.pt")
    config = TrainStageConfig(
        steps=steps, micro_batch_size=GLOBAL_BATCH // dist.world_size, grad_accum_steps=1, seq_len=SEQ,
        optimizer=OptimizerConfig(lr=3e-3), schedule=ScheduleConfig(kind="constant", warmup_steps=2),
        checkpoint=CheckpointConfig(every_steps=save_every or steps, keep_last=2), log_every=1,
        train_rows=train_rows,
    )
    engine_config = EngineConfig(kind=engine, zero_stage=zero if engine == "deepspeed" else 0,
                                 attn_implementation="eager", precision=precision,
                                 activation_checkpointing=activation_checkpointing,
                                 fsdp={"cpu_offload": True} if cpu_offload else {},
                                 fused_loss=True if fused_stand_in else "auto", compile=compile or "auto",
                                 # every tensor partitioned: by default ZeRO-3 keeps ones under 100k
                                 # elements whole, which is all of this tiny model's
                                 deepspeed_config={"zero_optimization": {"stage3_param_persistence_threshold": 0}}
                                 if engine == "deepspeed" and zero == 3 else None)
    if fused_stand_in:
        import liger_stand_in  # beside this script

        liger_stand_in.install()
    stream = SlowStream(VOCAB, SEQ, seed=7, sleep=step_sleep)
    result = fit(model, stream,
                 TrainingJob.resolve(config, engine_config, out, seed=0, stage_name=stage, dist=dist,
                                     shared_rows=SHARED_ROWS if train_rows == "new" else None))
    if fused_stand_in:
        (out / f"fused-calls-{dist.rank}.json").write_text(json.dumps(liger_stand_in.CALLS))
    if compile:
        from torch._dynamo.utils import counters

        (out / f"compiled-{dist.rank}.json").write_text(json.dumps(
            {"graph_breaks": sum(counters["graph_break"].values()), "graphs": counters["stats"]["unique_graphs"]}))
    if dist.rank == 0:
        (out / "result.json").write_text(json.dumps(dataclasses.asdict(result), default=str))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--engine", choices=["torch", "deepspeed", "fsdp"], default="deepspeed")
    parser.add_argument("--zero", type=int, default=2)
    parser.add_argument("--stage", choices=["stage1", "stage2"], default="stage2")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--save-every", type=int, default=None)
    parser.add_argument("--step-sleep", type=float, default=0.0)
    parser.add_argument("--hidden", type=int, default=32, help="wider: larger checkpoints, slower to write")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--activation-checkpointing", action="store_true")
    parser.add_argument("--cpu-offload", action="store_true", help="engine.fsdp.cpu_offload")
    parser.add_argument("--train-rows", choices=["all", "new"], default="all", help="new: keep SHARED_ROWS")
    parser.add_argument("--compile", action="store_true", help="engine.compile: true (records dynamo's graph counts)")
    parser.add_argument("--fused-stand-in", action="store_true",
                        help="engine.fused_loss: true with helpers/liger_stand_in.py's CPU kernel")
    torch.set_num_threads(1)  # two ranks share two cores
    train(**{k.replace("-", "_"): v for k, v in vars(parser.parse_args()).items()})


if __name__ == "__main__":
    main()
