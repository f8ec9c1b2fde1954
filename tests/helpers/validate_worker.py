"""`fit` with held-out validation every 2 steps, under any launcher (see test_train_monitoring_zero3.py).

    torchrun --nproc_per_node 2 validate_worker.py OUT deepspeed 3

Nine held-out windows (an odd count: rank 1 scores a padding row) from the synthetic generator;
OUT/metrics.jsonl gets the validation rows (rank 0).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

if not __package__:  # run as a script (torchrun, srun): sys.path[0] is tests/helpers; `helpers` is in tests/
    sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from helpers.synthetic import SyntheticStream, tiny_llama
from langadapt.recipe.train import CheckpointConfig, EngineConfig, TrainStageConfig, ValidationConfig
from langadapt.runtime.distributed import DistInfo
from langadapt.train.job import TrainingJob
from langadapt.train.loop import fit
from langadapt.train.monitoring.defaults import default_callbacks
from langadapt.train.monitoring.validation import HeldOutSet, Validation

VOCAB, SEQ, GLOBAL_BATCH = 96, 16, 8


def main(out: Path, engine: str, zero: int) -> None:
    torch.set_num_threads(1)
    dist = DistInfo.from_env()
    held = SyntheticStream(VOCAB, SEQ, seed=11)
    sets = [HeldOutSet("xx", np.stack([held.row(i) for i in range(9)]).astype(np.int64), 9 * SEQ)]
    config = TrainStageConfig(steps=4, micro_batch_size=GLOBAL_BATCH // dist.world_size, seq_len=SEQ, log_every=1,
                              checkpoint=CheckpointConfig(every_steps=4), validation=ValidationConfig(every_steps=2))
    validation = Validation(sets, config.validation, micro_batch_size=2, rank=dist.rank, world_size=dist.world_size)
    fit(tiny_llama(vocab_size=VOCAB, hidden=32, layers=2, seed=0), SyntheticStream(VOCAB, SEQ, seed=7),
        TrainingJob.resolve(config, EngineConfig(kind=engine, zero_stage=zero, attn_implementation="eager"), out,
                            seed=0, dist=dist),
        callbacks=default_callbacks(config, out, "run/stage2"), validation=validation)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]))
