"""Training engines behind one interface (`base.Engine`): plain PyTorch/DDP, DeepSpeed ZeRO, FSDP2.

`build_engine` picks one from `engine.kind`; DeepSpeed and FSDP are imported only when chosen.
"""

from __future__ import annotations

import torch

from langadapt.embeddings.row_plan import SharedRows
from langadapt.recipe.train import EngineConfig, TrainStageConfig
from langadapt.runtime.distributed import DistInfo, init_distributed
from langadapt.train.engines.base import Engine
from langadapt.train.engines.torch_engine import TorchEngine
from langadapt.train.policy import TrainableParams
from langadapt.train.rows import RowFreeze


def build_engine(model: torch.nn.Module, selection: TrainableParams, stage: TrainStageConfig,
                 config: EngineConfig, dist: DistInfo, stage_name: str = "stage",
                 shared_rows: SharedRows | None = None) -> Engine:
    """The engine `config.kind` names, over the trainable parameters only; with `stage.train_rows: new`,
    keeping `shared_rows` of the embedding matrices as they are (langadapt.train.rows).

    Starts the process group if the launcher has not: DeepSpeed and FSDP need one even for a
    single process, DDP only with several.
    """
    device = dist.device()
    freeze = RowFreeze.build(selection, stage.train_rows, shared_rows, stage_name)
    if config.kind == "deepspeed":
        from langadapt.train.engines.deepspeed_engine import DeepSpeedEngine, init_deepspeed_group

        init_deepspeed_group(dist)
        return DeepSpeedEngine(model, selection, stage, config, dist, device, stage_name, freeze)
    if config.kind == "fsdp":
        from langadapt.train.engines.fsdp_engine import FSDPEngine, init_fsdp_group

        init_fsdp_group(dist)
        return FSDPEngine(model, selection, stage, config, dist, device, freeze)
    if dist.distributed:
        init_distributed(dist)
    return TorchEngine(model, selection, stage, config, dist, device, freeze)
