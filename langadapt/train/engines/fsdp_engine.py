"""The FSDP2 engine: `torch.distributed.fsdp.fully_shard` per decoder block, then the root.

Layout (torchtitan's for Llama): one FSDP group per decoder block, all-gathered just before the
block runs and freed after it (`engine.fsdp.reshard_after_forward`; the last block is kept, its
backward starts at once), and the root group, `CausalLMLoss` around the model, holding what is
left: embeddings, final norm and head. The root's weights stay gathered from its forward to its
backward, so the fused loss may read the head's weight outside the head's own forward. Weights,
gradients and AdamW state are sharded over all ranks (ZeRO-3's memory; `langadapt plan` models
the gathered blocks on top); each shard is a DTensor, the optimizer steps the shards.

Mixed precision: fp32 master shards, gathered as bf16 for compute, gradients reduced in fp32
(`MixedPrecisionPolicy`); fp16 is refused in settings.check_engine. `engine.fsdp.cpu_offload`
keeps the shards in host memory (`CPUOffloadPolicy`): AdamW then steps on the CPU.

Frozen parameters (stage 1: the whole body) share their blocks' groups with nothing trainable.
FSDP2 allows mixed requires_grad in a group (only the trainable ones must share a dtype): a
frozen weight is still all-gathered, in forward and again in backward (the embeddings' gradient
flows through it), but it gets no gradient, so nothing of it is reduce-scattered, and it is
never given to the optimizer (policy.select_trainable): it stays bit-identical
(tests/train/test_train_fsdp_multiprocess.py).

Checkpoints are `torch.distributed.checkpoint` folders (one file per rank plus metadata, in
`<checkpoint>/fsdp`), written inside the Checkpointer's temporary folder, so its atomic publish
holds; DCP reshards on load, so a run resumes on another world size as it is.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.distributed as torch_dist

from langadapt.runtime.distributed import DistInfo, default_backend, init_distributed
from langadapt.train.engines.base import Engine, build_optimizer, loss_module, tied_aliases
from langadapt.train.fastpath import repeated_blocks
from langadapt.train.policy import TrainableParams, set_learning_rate
from langadapt.train.rows import RowFreeze

if TYPE_CHECKING:
    from langadapt.train.job import TrainingJob

TAG = "fsdp"
"""Sub-folder of a langadapt checkpoint holding the torch.distributed.checkpoint files."""


def init_fsdp_group(dist: DistInfo) -> None:
    """The process group `fully_shard` shards over, also for one process.

    A lone process gets a one-rank group on an in-memory store (no port to pick, no rendezvous):
    its checkpoints are then the same DCP folders as a job's, so it can resume theirs and they
    its (world-size change)."""
    if dist.distributed:
        init_distributed(dist)
    elif not torch_dist.is_initialized():
        init_distributed(dist)  # selects the GPU, if any, before the group exists
        torch_dist.init_process_group(default_backend(), store=torch_dist.HashStore(), rank=0, world_size=1)


class FSDPEngine(Engine):
    """FSDP2 over the whole model; AdamW over the trainable shards only (see module docstring)."""

    def __init__(self, model: torch.nn.Module, selection: TrainableParams, job: TrainingJob,
                 freeze: RowFreeze | None = None) -> None:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

        stage, config, dist, device = job.config, job.engine, job.dist, job.dist.device()
        self.device, self.model, self.accum = device, model.train(), job.settings.grad_accum
        self.grad_clip, self.freeze = stage.grad_clip or math.inf, freeze
        if config.activation_checkpointing:  # inside each block's call, so FSDP's hooks recompute too
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        # Compiles the blocks in place first (torchtitan's order).
        self.forward_model = loss_module(model, config, distillation=job.distillation)
        mesh = init_device_mesh(device.type, (dist.world_size,))
        bf16 = config.precision == "bf16"
        options = {
            "mesh": mesh,
            "mp_policy": MixedPrecisionPolicy(param_dtype=torch.bfloat16 if bf16 else None,
                                              reduce_dtype=torch.float32 if bf16 else None),
            "offload_policy": CPUOffloadPolicy(pin_memory=device.type == "cuda") if config.fsdp.cpu_offload
            else OffloadPolicy(),
        }
        blocks = list(repeated_blocks(model) or [])
        for i, block in enumerate(blocks):
            reshard = config.fsdp.reshard_after_forward and i < len(blocks) - 1
            fully_shard(block, reshard_after_forward=reshard, **options)
        fully_shard(self.forward_model, **options)
        # fully_shard replaced every parameter by a new DTensor one: the selection is pointed at
        # those (the optimizer's), and no longer keeps the unsharded originals alive on each rank.
        sharded = dict(model.named_parameters())
        selection.named[:] = [(name, sharded[name]) for name, _ in selection.named]
        self.params = selection.params
        step_device = torch.device("cpu") if config.fsdp.cpu_offload else device
        self.optimizer = build_optimizer(selection, stage.optimizer_in_force, step_device)

    def micro_step(self, inputs: torch.Tensor, labels: torch.Tensor, position_ids: torch.Tensor | None = None,
                   distill_rows: torch.Tensor | None = None) -> torch.Tensor:
        # Gradients are reduce-scattered after every micro-batch: skipping that until the last one
        # (as DDP's no_sync does) would hold whole unsharded gradients, ZeRO-3's saving lost.
        loss = self.forward_model(inputs.to(self.device), labels.to(self.device), position_ids, distill_rows)
        (loss / self.accum).backward()  # the mean over the global batch; FSDP averages over ranks
        return loss.detach()

    def step(self, lr: float, skip: bool) -> float:
        set_learning_rate(self.optimizer, lr)
        if self.freeze is not None:  # this rank's shard of the reduce-scattered gradients, before the norm
            self.freeze.zero_shared()
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.grad_clip)  # over all shards (a collective)
        norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
        if not skip and math.isfinite(norm):
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def _state(self) -> dict:
        """Model and optimizer state as DCP saves it. A tied matrix is one parameter under two names,
        and DCP would write it under both (a second vocabulary-sized matrix per checkpoint): it is
        kept under its first name only, and `load` hands the other name the same tensor back."""
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model, optimizer = get_state_dict(self.model, self.optimizer)
        aliases = tied_aliases(self.model)
        return {"model": {k: v for k, v in model.items() if k not in aliases}, "optimizer": optimizer}

    def save(self, directory: Path) -> None:
        import torch.distributed.checkpoint as dcp

        dcp.save(self._state(), checkpoint_id=directory / TAG)

    def load(self, directory: Path) -> None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_state_dict

        state = self._state()  # the shapes and shards this world size wants, filled in place
        dcp.load(state, checkpoint_id=directory / TAG)
        weights = state["model"]
        weights.update({alias: weights[name] for alias, name in tied_aliases(self.model).items()})
        set_state_dict(self.model, self.optimizer, model_state_dict=weights, optim_state_dict=state["optimizer"])

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        # Gathered tensor by tensor into rank 0's host memory (the other ranks get {}).
        return get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def consolidated_weights(folder: Path) -> dict[str, torch.Tensor]:
    """The full model weights of an FSDP checkpoint folder (`<step>/fsdp`), read in this one
    process (no process group): what `checkpoint_model` turns into a model folder. The optimizer
    state in the same files is not read."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    metadata = dcp.FileSystemReader(folder).read_metadata().state_dict_metadata
    prefix = "model."  # `_state`'s nesting, flattened by DCP
    weights = {key.removeprefix(prefix): torch.empty(meta.size, dtype=meta.properties.dtype)
               for key, meta in metadata.items()
               if key.startswith(prefix) and isinstance(meta, TensorStorageMetadata)}
    with warnings.catch_warnings():  # torch warns that there is no process group: here, on purpose
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load({"model": weights}, checkpoint_id=folder, no_dist=True)
    return weights
