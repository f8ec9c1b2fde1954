"""The plain PyTorch engine: one process, or DDP across several (no sharding)."""

from __future__ import annotations

import math
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.distributed as torch_dist

from langadapt.run.layout import WEIGHTS
from langadapt.train.engines.base import Engine, build_optimizer, loss_module
from langadapt.train.policy import TrainableParams, set_learning_rate
from langadapt.train.rows import RowFreeze

if TYPE_CHECKING:
    from langadapt.train.job import TrainingJob


class TorchEngine(Engine):
    """Plain PyTorch: AdamW, autocast for bf16/fp16 (GradScaler for fp16), DDP across ranks."""

    def __init__(self, model: torch.nn.Module, selection: TrainableParams, job: TrainingJob,
                 freeze: RowFreeze | None = None) -> None:
        stage, config, dist, device = job.config, job.engine, job.dist, job.dist.device()
        self.device, self.model, self.accum = device, model.to(device).train(), job.settings.grad_accum
        self.freeze = freeze
        self.params, self.grad_clip = selection.params, stage.grad_clip or math.inf
        if config.activation_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.forward_model: torch.nn.Module = loss_module(model, config, distillation=job.distillation)
        if dist.world_size > 1:
            ids = [device.index] if device.type == "cuda" else None
            # Gradients as views into DDP's all-reduce buckets: by default DDP keeps the buckets as a
            # second copy of every gradient (4 bytes per trainable parameter in fp32, 28 GB for 7B)
            # and copies into them each step; `plan`'s ZeRO-0 row has no room for that copy.
            self.forward_model = torch.nn.parallel.DistributedDataParallel(
                self.forward_model, device_ids=ids, gradient_as_bucket_view=True)
        self.optimizer = build_optimizer(selection, stage.optimizer_in_force, device)
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(config.precision)
        self.autocast = torch.autocast(device.type, dtype=dtype, enabled=dtype is not None)
        self.scaler = torch.amp.GradScaler(device.type) if config.precision == "fp16" else None
        self._micro = 0

    def micro_step(self, inputs: torch.Tensor, labels: torch.Tensor, position_ids: torch.Tensor | None = None,
                   distill_rows: torch.Tensor | None = None) -> torch.Tensor:
        self._micro += 1
        last = self._micro % self.accum == 0
        # DDP all-reduces gradients in every backward; only the last micro-batch needs it.
        no_sync = getattr(self.forward_model, "no_sync", None)
        with (no_sync() if no_sync is not None and not last else nullcontext()):
            with self.autocast:
                loss = self.forward_model(inputs.to(self.device), labels.to(self.device), position_ids, distill_rows)
            scaled = loss / self.accum  # the mean over the global batch, not a sum of means
            (self.scaler.scale(scaled) if self.scaler else scaled).backward()
        return loss.detach()

    def step(self, lr: float, skip: bool) -> float:
        set_learning_rate(self.optimizer, lr)
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        if self.freeze is not None:  # after DDP's all-reduce, before the norm
            self.freeze.zero_shared()
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

            save_model(self.model, str(directory / WEIGHTS))
            extra = {"scaler": self.scaler.state_dict()} if self.scaler else {}
            torch.save({"optimizer": self.optimizer.state_dict(), **extra}, directory / "optimizer.pt")

    def load(self, directory: Path) -> None:
        from safetensors.torch import load_model

        load_model(self.model, str(directory / WEIGHTS), device=str(self.device))
        state = torch.load(directory / "optimizer.pt", map_location=self.device, weights_only=True)
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scaler is not None:
            self.scaler.load_state_dict(state["scaler"])

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}
