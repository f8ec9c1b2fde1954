"""The torch engine under DDP on 2 ranks: are its gradients DDP's buckets, or a second copy?

    torchrun --nproc_per_node 2 ddp_worker.py OUT

Two optimizer steps of 2 micro-steps each (the second after `zero_grad(set_to_none=True)`, so
DDP must re-point the fresh gradients at its buckets). Rank 0 writes OUT/storages.json: how
many trainable parameters there are, how many distinct storages their gradients live in after
each step's backward, and the loss of each step (the run must still train).
"""

from __future__ import annotations

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
from langadapt.train.job import TrainingJob
from langadapt.train.policy import select_trainable


def main() -> None:
    out = Path(sys.argv[1])
    torch.set_num_threads(1)
    dist = DistInfo.from_env()
    model = tiny_llama(vocab_size=96, hidden=32, layers=2, seed=0)
    stage = TrainStageConfig(steps=2, micro_batch_size=2, grad_accum_steps=2, seq_len=16, optimizer=OptimizerConfig(lr=1e-3))
    selection = select_trainable(model, stage.trainable_patterns("stage2"))
    stream = SyntheticStream(96, 16, seed=7)
    storages, losses = [], []
    job = TrainingJob.resolve(stage, EngineConfig(kind="torch", attn_implementation="eager"), out, seed=0,
                              stage_name="stage2", dist=dist)
    with build_engine(model, selection, job) as engine:
        for _ in range(2):
            batch = torch.from_numpy(stream.next_batch(4 * dist.world_size, dist.rank, dist.world_size))
            losses.append(sum(float(engine.micro_step(mb[:, :-1], mb[:, 1:])) for mb in batch.split(2)))
            storages.append(len({p.grad.untyped_storage().data_ptr() for p in selection.params}))
            engine.step(lr=1e-3, skip=False)
    if dist.rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        (out / "storages.json").write_text(json.dumps(
            {"params": len(selection.params), "storages": storages, "losses": losses}))


if __name__ == "__main__":
    main()
