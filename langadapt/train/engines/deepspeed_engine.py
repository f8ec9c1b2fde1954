"""The DeepSpeed engine: `deepspeed.initialize` over the trainable parameters, ZeRO 0-3.

We own the optimizer (a torch AdamW, so no C++ op has to compile, on CPU, CUDA or ROCm) and the
LR schedule (set on the optimizer before each step); DeepSpeed owns gradient accumulation,
reduction, clipping, bf16/fp16 and ZeRO partitioning. The recipe may pass a raw DeepSpeed JSON
(`engine.deepspeed_config`): our values are filled in, and a raw value that contradicts one of
ours is an error naming both keys, never a silent winner.
"""

from __future__ import annotations

import gc
import logging
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from langadapt.errors import LangadaptError
from langadapt.modeling import body_and_head
from langadapt.runtime.distributed import DistInfo, barrier, init_distributed
from langadapt.train.engines.base import Engine, build_optimizer, loss_module
from langadapt.train.engines.deepspeed_json import offloads_optimizer
from langadapt.train.fastpath import repeated_blocks
from langadapt.train.policy import TrainableParams, set_learning_rate
from langadapt.train.rows import RowFreeze

if TYPE_CHECKING:
    from langadapt.train.job import TrainingJob

log = logging.getLogger("langadapt.train")

TAG = "deepspeed"
"""Sub-folder of a langadapt checkpoint holding DeepSpeed's own checkpoint files."""
GROUP_HYPERPARAMETERS = ("weight_decay", "betas", "eps", "lr_scale")
"""Per-group optimizer settings that come from the recipe (lr is set before every step)."""
UNIVERSAL_TAG = "universal"
"""Sub-folder holding the same checkpoint in DeepSpeed's universal (world-size-free) format,
written the first time it is resumed at another world size."""


def init_deepspeed_group(dist: DistInfo) -> None:
    """DeepSpeed's process group, also for one process (init_distributed keeps DeepSpeed on CPU
    from JIT-compiling its shared-memory all-reduce: gloo does that job)."""
    init_distributed(dist, use_deepspeed=True)


class DeepSpeedEngine(Engine):
    """`deepspeed.initialize` with our AdamW over the trainable parameters only."""

    def __init__(self, model: torch.nn.Module, selection: TrainableParams, job: TrainingJob,
                 freeze: RowFreeze | None = None) -> None:
        import deepspeed

        stage, config, dist, device = job.config, job.engine, job.dist, job.dist.device()
        ds_config = job.deepspeed_config  # built with the job (ZeRO-3: the model was loaded with it)
        self.device, self.model, self.accum, self.zero = device, model.train(), job.settings.grad_accum, config.zero_stage
        self.rank, self.world_size = dist.rank, dist.world_size
        self.params, self.fp32 = selection.params, config.precision == "fp32"
        if config.activation_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        step_device = torch.device("cpu") if offloads_optimizer(ds_config) else device
        self.optimizer = build_optimizer(selection, stage.optimizer_in_force, step_device)
        if self.zero == 3 and config.compile and (blocks := repeated_blocks(model)) is not None:
            # ZeRO-3 hooks every module: inside a compiled block each layer's fetch would break the
            # graph (measured on CPU, 2 blocks, 3 steps: 38 graph breaks, 14 graphs). As leaves,
            # the blocks are fetched whole at their own edge, outside the compiled forward: 0 and 1,
            # as under ZeRO-2 (tests/train/test_train_multiprocess_zero.py).
            from deepspeed.utils import set_z3_leaf_modules

            set_z3_leaf_modules(model, [type(blocks[0])])
        loss = loss_module(model, config, hooks_outside=self.zero == 3, distillation=job.distillation)
        if self.zero == 3 and loss.fused is not None:
            # The fused loss takes the head's weight as a matrix, outside the head's forward, where
            # ZeRO-3 leaves it partitioned (shape [0]): registered on the loss module, it is gathered
            # for the loss module's whole forward and backward. DeepSpeed 0.19.8 would also register
            # it on first access inside a forward (its parameter getter); this is the documented
            # API, which does not depend on that.
            deepspeed.zero.register_external_parameter(loss, body_and_head(model)[1].weight)
        self.ds, _, _, _ = deepspeed.initialize(
            model=loss, model_parameters=selection.params, optimizer=self.optimizer, config=ds_config,
        )
        self.forward_model = self.ds
        self._micro = 0
        self.freeze = freeze
        if freeze is not None:  # gradients leave p.grad for DeepSpeed's buckets in backward: mask them on the way
            freeze.register_hooks()

    def micro_step(self, inputs: torch.Tensor, labels: torch.Tensor, position_ids: torch.Tensor | None = None,
                   distill_rows: torch.Tensor | None = None) -> torch.Tensor:
        loss = self.ds(inputs.to(self.device), labels.to(self.device), position_ids, distill_rows)
        self.ds.backward(loss)  # DeepSpeed divides by gradient_accumulation_steps itself
        self._micro += 1
        if self._micro % self.accum:
            self.ds.step()  # not a boundary: DeepSpeed only counts the micro-step
        return loss.detach()

    def step(self, lr: float, skip: bool) -> float:
        set_learning_rate(self.optimizer, lr)  # the wrapped optimizer reads these groups
        norm = None
        if self.zero == 0 and self.fp32:  # no DeepSpeed wrapper: it would step on NaN grads
            grads = [p.grad for p in self.params if p.grad is not None]
            norm = float(torch.nn.utils.get_total_norm(grads)) if grads else 0.0
        self.optimizer.skip_next = skip or (norm is not None and not math.isfinite(norm))
        self.ds.step()  # the boundary: reduce, clip, update (or skip), zero the gradients
        self.optimizer.skip_next = False
        if norm is None:
            norm = self.ds.get_global_grad_norm()
            norm = float(norm) if norm is not None else math.nan
        return norm

    def save(self, directory: Path) -> None:
        self.ds.save_checkpoint(str(directory), tag=TAG, save_latest=False)

    def load(self, directory: Path) -> None:
        tag, saved_ranks = TAG, zero_shard_count(directory / TAG)
        if self.zero >= 1 and saved_ranks not in (0, self.world_size):
            # ZeRO shards optimizer state per data-parallel rank and refuses another world size;
            # DeepSpeed's universal format stores it per parameter and loads at any size.
            log.info("%s: saved by %d ranks, resuming on %d: loading it as a universal checkpoint",
                     directory.name, saved_ranks, self.world_size)
            convert_to_universal(directory, self.rank)
            # The flag is read from the engine's config at load time; it is only settable in the
            # JSON before initialize, when the checkpoint to resume is not known yet.
            self.ds._config.load_universal_checkpoint = True
            tag = UNIVERSAL_TAG
        ours = [{k: g[k] for k in GROUP_HYPERPARAMETERS if k in g} for g in self.optimizer.param_groups]
        path, _ = self.ds.load_checkpoint(str(directory), tag=tag, load_lr_scheduler_states=False)
        if path is None:
            raise LangadaptError(f"{directory}: no DeepSpeed checkpoint under tag {tag!r}")
        # ZeRO-3's universal loader copies the FIRST saved group's hyperparameters into every group,
        # which would put weight decay on the no-decay group (norms, biases). With the next bug, a
        # 5e-4 loss drift within four steps (tests/train/test_train_multiprocess_worldsize.py). The
        # recipe defines these values; the checkpoint need not.
        for group, hyper in zip(self.optimizer.param_groups, ours):
            group.update(hyper)
        # The same loader also hands ONE `step` tensor to every group's state; AdamW increments it
        # in place, once per group per step, so each group's bias correction would run ahead.
        for state in self.optimizer.state.values():
            if torch.is_tensor(state.get("step")):
                state["step"] = state["step"].clone()

    def release(self) -> None:
        """Free the optimizer (fp32 master weights, Adam moments) and DeepSpeed's hooks now.

        Without this a stage's engine outlived the stage: the model, which the caller still holds,
        reaches the optimizer (ZeRO-1/2 gradient hooks; under ZeRO-3 `_z3_optimizer` on every
        parameter, and the parameters' closures reach the wrapper module, which carries the engine's
        forward hooks), and two process-wide ZeRO-3 structures keep that module, so the model and
        with the hooks the whole engine, until the process ends (DeepSpeed 0.19.8; `destroy()`
        clears none of these): the top module stays on `parameter_offload.FWD_MODULE_STACK` (pushed
        by `setup_zero_stage3_hooks`, never popped), and the coordinator's `__params_to_release` memoises in a class-level `lru_cache` keyed by
        (coordinator, module, step). On an H100 that was 16 bytes per parameter (17 GiB for 1.1B
        parameters) missing to everything after the stage in the same process.
        tests/train/test_ds_engine_release.py checks that the engine, the optimizer and its fp32 partitions
        are freed at once, and the model once the caller drops it.
        """
        from deepspeed.runtime.zero import parameter_offload
        from deepspeed.runtime.zero.partitioned_param_coordinator import PartitionedParameterCoordinator

        self.ds.destroy()  # removes the optimizer's gradient hooks and ZeRO-3's module hooks
        if self.freeze is not None:
            self.freeze.remove_hooks()
        # DeepSpeed internals (0.19.8), each looked up defensively: in another version a missing one
        # must cost memory at worst, never fail a stage whose model is already written.
        for hook in (getattr(self.ds, "module_forward_pre_hook", None), getattr(self.ds, "module_forward_post_hook", None)):
            if hook is not None:  # the engine's own, left by destroy(); ZeRO-3 parameters reach the wrapper
                hook.remove()
        stack = getattr(parameter_offload, "FWD_MODULE_STACK", None)
        if isinstance(stack, list):
            stack[:] = [module for module in stack if module is not self.ds.module]
        memoised = getattr(PartitionedParameterCoordinator, "_PartitionedParameterCoordinator__params_to_release", None)
        for cell in getattr(memoised, "__closure__", None) or ():  # under DeepSpeed's NVTX wrapper
            if hasattr(cell.cell_contents, "cache_clear"):  # other live engines just recompute
                cell.cell_contents.cache_clear()
        for param in self.model.parameters():
            param.__dict__.pop("_z3_optimizer", None)
        del self.ds, self.forward_model, self.optimizer, self.params
        gc.collect()  # the engine's own reference cycles (hooks <-> engine) hold the tensors until then

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        if self.zero == 3:  # partitioned: parameters have shape [0] here, gather them
            state = self.ds._zero3_consolidated_16bit_state_dict() or {}
            return {k.removeprefix("model."): v for k, v in state.items()}  # CausalLMLoss's prefix
        return {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}


def zero_shard_count(folder: Path) -> int:
    """Data-parallel ranks that wrote a ZeRO checkpoint (one optimizer shard each; 0: not ZeRO).

    DeepSpeed prefixes the shards with `bf16_` when bf16 is on (`_get_zero_ckpt_prefix`): both count."""
    return len(list(folder.glob("*zero_pp_rank_*_mp_rank_*_optim_states.pt")))


def consolidated_weights(folder: Path) -> dict[str, torch.Tensor]:
    """The model weights of a DeepSpeed checkpoint folder (`<step>/deepspeed`), named as in the
    Hugging Face model's state dict, in fp32, joined in this one process on CPU (no process group):
    what `checkpoint_model` turns into a model folder.

    ZeRO 1-3: DeepSpeed's `get_fp32_state_dict_from_zero_checkpoint` joins every rank's fp32 master
    partitions (the trained weights at full precision, also under bf16) and, for ZeRO 2-3, the
    fragments of frozen parameters. ZeRO-1 saves no frozen fragments (DeepSpeed writes them only
    when gradients are partitioned) and ZeRO-0 has no partitions at all: those parameters are taken
    from the whole module state rank 0 saved (under bf16 they were only ever bf16, so the upcast
    is exact). The optimizer's moments are dropped as the shards are read. Each tensor is copied
    out of DeepSpeed's flat partition (ZeRO 1-2 hands out views into it, which safetensors refuses
    to save): peak memory twice the fp32 model, 56 GB for 7B parameters.
    """
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    state: dict[str, torch.Tensor] = {}
    if zero_shard_count(folder):
        state = get_fp32_state_dict_from_zero_checkpoint(str(folder.parent), tag=folder.name)
    whole = folder / "mp_rank_00_model_states.pt"  # ZeRO 0-2 (ZeRO-3 writes one partitioned file per rank)
    if whole.is_file():
        module = torch.load(whole, map_location="cpu", mmap=True, weights_only=False)["module"]
        state.update({name: tensor for name, tensor in module.items() if name not in state})
    if not state:
        raise LangadaptError(f"{folder}: no DeepSpeed model or ZeRO optimizer states in it")
    return {name.removeprefix("model."): tensor.to(torch.float32 if tensor.is_floating_point() else tensor.dtype,
                                                   copy=True)
            for name, tensor in state.items()}  # CausalLMLoss's prefix off: the HF model's names


def convert_to_universal(checkpoint: Path, rank: int) -> None:
    """Rank 0 writes `checkpoint/universal` with DeepSpeed's `ds_to_universal` (once; atomic by
    rename); the other ranks wait for it. The original shards are left as they are.

    A subprocess, because the converter is a script with its own argument parsing and worker
    pool. For a 7B model it reads and rewrites the whole optimizer state: minutes, 3x the
    model's fp32 size on disk.
    """
    target = checkpoint / UNIVERSAL_TAG
    if rank == 0 and not target.is_dir():
        tmp = checkpoint / f"{UNIVERSAL_TAG}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        cmd = [sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal", "--input_folder",
               str(checkpoint / TAG), "--output_folder", str(tmp), "--inject_missing_state"]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise LangadaptError(f"{checkpoint}: converting to a universal checkpoint failed: {tail[0]}")
        os.replace(tmp, target)
        # The converter also names its output in `latest_universal` beside it: the temporary name.
        (checkpoint / "latest_universal").write_text(UNIVERSAL_TAG)
    barrier()


def load_model_for_zero3(path: Path, ds_config: dict, **kwargs: Any) -> torch.nn.Module:
    """Load a HF model straight into ZeRO-3 partitions (never whole on one rank)."""
    from transformers import AutoModelForCausalLM
    from transformers.integrations import HfDeepSpeedConfig

    keep = HfDeepSpeedConfig(ds_config)  # must stay alive until deepspeed.initialize
    model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    model._langadapt_hf_ds_config = keep
    return model


def release_zero3_loading(model: torch.nn.Module) -> None:
    """Forget the HfDeepSpeedConfig that `load_model_for_zero3` kept alive.

    While it lives, transformers loads EVERY model partitioned (`is_deepspeed_zero3_enabled`), so
    the evaluate stage of the same `langadapt run` got [0]-shaped embeddings after a ZeRO-3 stage 2
    (seen on an H100: "Padding_idx must be within num_embeddings").
    """
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config

    model.__dict__.pop("_langadapt_hf_ds_config", None)
    unset_hf_deepspeed_config()
