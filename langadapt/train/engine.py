"""One small interface over the ways a model is trained: plain PyTorch, DeepSpeed or FSDP2.

The loop sees only `Engine`: `micro_step` (forward + backward of one micro-batch), `step` (clip
and optimizer update at the accumulation boundary, or a skip), `save`/`load` (resumable state),
`export` (a consolidated Hugging Face folder) and `all_reduce_sum` (ranks agree on a decision).
Both engines receive only the trainable parameters (`policy.select_trainable`), and every stage
builds a NEW engine and optimizer: under ZeRO, parameters frozen when an engine was built are
never added to it later, so stage 2 cannot reuse stage 1's.

Device code uses `torch.cuda` only through APIs that ROCm builds of torch also provide, so
AMD GPUs (LUMI) take the same path as NVIDIA ones.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.distributed as torch_dist

from langadapt.runtime.distributed import DistInfo, init_distributed
from langadapt.train.config import EngineConfig, OptimizerConfig, TrainStageConfig
from langadapt.train.fastpath import CausalLMLoss, compile_blocks, use_fused_loss
from langadapt.train.policy import TrainableParams, param_groups


class SkippableAdamW(torch.optim.AdamW):
    """AdamW whose next step can be turned into a no-op.

    Skipping a step (non-finite loss) must leave weights AND moments untouched. DeepSpeed owns
    the call to `step()`, so the skip is set on the optimizer it wraps: under ZeRO the wrapper
    then copies back unchanged master weights, without ZeRO nothing is touched at all.
    """

    skip_next: bool = False

    def step(self, closure=None):  # type: ignore[override]
        if self.skip_next:
            self.skip_next = False
            return None
        return super().step(closure)


def build_optimizer(selection: TrainableParams, config: OptimizerConfig, device: torch.device) -> SkippableAdamW:
    """AdamW over the trainable parameters only (decay groups from the policy)."""
    return SkippableAdamW(
        param_groups(selection, config), lr=config.lr, betas=config.betas, eps=config.eps,
        fused=device.type == "cuda" or None,  # fused kernels exist for CUDA and ROCm
    )


def loss_module(model: torch.nn.Module, config: EngineConfig) -> CausalLMLoss:
    """The model with its loss, fast path applied as `config` (already resolved by check_engine) says."""
    if config.compile:
        compile_blocks(model)
    return CausalLMLoss(model, use_fused_loss(model, bool(config.fused_loss)))


class Engine:
    """The operations the training loop needs; see `TorchEngine`, `DeepSpeedEngine` and `FSDPEngine`."""

    device: torch.device
    model: torch.nn.Module
    forward_model: torch.nn.Module
    """The model with its mean loss, `(inputs, labels) -> loss`, wrapped as this engine runs it (DDP,
    DeepSpeed, FSDP): forward-only users (validation) go through it, so sharded weights are gathered."""

    def micro_step(self, inputs: torch.Tensor, labels: torch.Tensor,
                   position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Forward and backward of one micro-batch; returns the detached loss. `position_ids`
        (document masking) restart at each document, and attention stays inside documents."""
        raise NotImplementedError

    def step(self, lr: float, skip: bool) -> float:
        """Apply (or with skip, discard) the accumulated gradients; returns the pre-clip norm."""
        raise NotImplementedError

    def save(self, directory: Path) -> None:
        """Write weights and optimizer state into `directory` (called on every rank)."""
        raise NotImplementedError

    def load(self, directory: Path) -> None:
        """Restore what `save` wrote."""
        raise NotImplementedError

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Every weight, gathered, on CPU (rank 0; other ranks may get an empty dict)."""
        raise NotImplementedError

    def export(self, directory: Path, rank: int) -> None:
        """A Hugging Face model folder (safetensors) with the consolidated weights, from rank 0."""
        state = self.full_state_dict()
        if rank == 0:
            self.model.save_pretrained(directory, state_dict=state)

    def release(self) -> None:
        """Free what the engine holds beside the model (optimizer state, hooks) when the stage ends, so
        the stages after it in the same process get the memory. Nothing to do where dropping the last
        reference frees it all (the torch engine)."""

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def all_reduce_sum(self, values: list[float]) -> list[float]:
        """Sum values over ranks, so every rank takes the same decision (skip, stop, save)."""
        if not torch_dist.is_initialized() or torch_dist.get_world_size() == 1:
            return values
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        torch_dist.all_reduce(tensor)
        return tensor.tolist()


class TorchEngine(Engine):
    """Plain PyTorch: AdamW, autocast for bf16/fp16 (GradScaler for fp16), DDP across ranks."""

    def __init__(self, model: torch.nn.Module, selection: TrainableParams, stage: TrainStageConfig,
                 config: EngineConfig, dist: DistInfo, device: torch.device) -> None:
        self.device, self.model, self.accum = device, model.to(device).train(), stage.grad_accum_steps
        self.params, self.grad_clip = selection.params, stage.grad_clip or math.inf
        if config.activation_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.forward_model: torch.nn.Module = loss_module(model, config)
        if dist.world_size > 1:
            ids = [device.index] if device.type == "cuda" else None
            self.forward_model = torch.nn.parallel.DistributedDataParallel(self.forward_model, device_ids=ids)
        self.optimizer = build_optimizer(selection, stage.optimizer, device)
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(config.precision)
        self.autocast = torch.autocast(device.type, dtype=dtype, enabled=dtype is not None)
        self.scaler = torch.amp.GradScaler(device.type) if config.precision == "fp16" else None
        self._micro = 0

    def micro_step(self, inputs: torch.Tensor, labels: torch.Tensor,
                   position_ids: torch.Tensor | None = None) -> torch.Tensor:
        self._micro += 1
        last = self._micro % self.accum == 0
        # DDP all-reduces gradients in every backward; only the last micro-batch needs it.
        no_sync = getattr(self.forward_model, "no_sync", None)
        with (no_sync() if no_sync is not None and not last else nullcontext()):
            with self.autocast:
                loss = self.forward_model(inputs.to(self.device), labels.to(self.device), position_ids)
            scaled = loss / self.accum  # the mean over the global batch, not a sum of means
            (self.scaler.scale(scaled) if self.scaler else scaled).backward()
        return loss.detach()

    def step(self, lr: float, skip: bool) -> float:
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        norm = float(torch.nn.utils.clip_grad_norm_(self.params, self.grad_clip))
        if not skip and math.isfinite(norm):
            (self.scaler.step(self.optimizer) if self.scaler else self.optimizer.step())
        if self.scaler is not None:
            self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def save(self, directory: Path) -> None:
        if not torch_dist.is_initialized() or torch_dist.get_rank() == 0:  # DDP replicas are identical
            from safetensors.torch import save_model

            save_model(self.model, str(directory / "model.safetensors"))
            extra = {"scaler": self.scaler.state_dict()} if self.scaler else {}
            torch.save({"optimizer": self.optimizer.state_dict(), **extra}, directory / "optimizer.pt")

    def load(self, directory: Path) -> None:
        from safetensors.torch import load_model

        load_model(self.model, str(directory / "model.safetensors"), device=str(self.device))
        state = torch.load(directory / "optimizer.pt", map_location=self.device, weights_only=True)
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scaler is not None:
            self.scaler.load_state_dict(state["scaler"])

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}


def build_engine(model: torch.nn.Module, selection: TrainableParams, stage: TrainStageConfig,
                 config: EngineConfig, dist: DistInfo, stage_name: str = "stage") -> Engine:
    """The engine `config.kind` names, over the trainable parameters only.

    Starts the process group if the launcher has not: DeepSpeed and FSDP need one even for a
    single process, DDP only with several.
    """
    device = dist.device()
    if config.kind == "deepspeed":
        from langadapt.train.ds_engine import DeepSpeedEngine, init_deepspeed_group

        init_deepspeed_group(dist, device)
        return DeepSpeedEngine(model, selection, stage, config, dist, device, stage_name)
    if config.kind == "fsdp":
        from langadapt.train.fsdp_engine import FSDPEngine, init_fsdp_group

        init_fsdp_group(dist)
        return FSDPEngine(model, selection, stage, config, dist, device)
    if dist.distributed:
        init_distributed(dist)
    return TorchEngine(model, selection, stage, config, dist, device)
