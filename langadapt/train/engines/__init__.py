"""Training engines behind one interface (`base.Engine`): plain PyTorch/DDP, DeepSpeed ZeRO, FSDP2.

`build_engine` picks one from the job's `engine.kind`; DeepSpeed and FSDP are imported only when
chosen. Each engine takes the resolved `TrainingJob` and reads its own slice of it (batch shape,
clipping, optimizer, engine settings, world; DeepSpeed also the job's DeepSpeed JSON).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from langadapt.runtime.distributed import init_distributed
from langadapt.train.engines.base import Engine
from langadapt.train.engines.torch_engine import TorchEngine
from langadapt.train.policy import TrainableParams
from langadapt.train.rows import RowFreeze

if TYPE_CHECKING:  # train.job builds the DeepSpeed JSON from this package's deepspeed_engine
    from langadapt.train.job import TrainingJob


def build_engine(model: torch.nn.Module, selection: TrainableParams, job: TrainingJob) -> Engine:
    """The engine `job.engine.kind` names, over the trainable parameters only; with `train_rows: new`,
    keeping `job.shared_rows` of the embedding matrices as they are (langadapt.train.rows).

    Starts the process group if the launcher has not: DeepSpeed and FSDP need one even for a
    single process, DDP only with several.
    """
    freeze = RowFreeze.build(selection, job.config.train_rows, job.shared_rows, job.stage)
    if job.engine.kind == "deepspeed":
        from langadapt.train.engines.deepspeed_engine import DeepSpeedEngine, init_deepspeed_group

        init_deepspeed_group(job.dist)
        return DeepSpeedEngine(model, selection, job, freeze)
    if job.engine.kind == "fsdp":
        from langadapt.train.engines.fsdp_engine import FSDPEngine, init_fsdp_group

        init_fsdp_group(job.dist)
        return FSDPEngine(model, selection, job, freeze)
    if job.dist.distributed:
        init_distributed(job.dist)
    return TorchEngine(model, selection, job, freeze)
