"""One small interface over the ways a model is trained: plain PyTorch, DeepSpeed or FSDP2.

The loop sees only `Engine`: `micro_step` (forward + backward of one micro-batch), `step` (clip
and optimizer update at the accumulation boundary, or a skip), `save`/`load` (resumable state),
`export` (a consolidated Hugging Face folder) and `all_reduce_sum` (ranks agree on a decision).
Each of the three gives its optimizer only the trainable parameters (`policy.select_trainable`),
and every stage builds a NEW engine and optimizer: under ZeRO, parameters frozen when an engine
was built are never added to it later, so stage 2 cannot reuse stage 1's.

Device code uses `torch.cuda` only through APIs that ROCm builds of torch also provide, so
AMD GPUs (LUMI) take the same path as NVIDIA ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.distributed as torch_dist

from langadapt.recipe.train import EngineConfig, OptimizerConfig
from langadapt.train.fastpath import CausalLMLoss, compile_blocks, use_fused_loss
from langadapt.train.policy import TrainableParams, param_groups

if TYPE_CHECKING:
    from langadapt.train.distill import ReplayDistillation


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
        # CUDA and ROCm: one kernel, no full-size temporaries. Not on CPU, although PyTorch has one
        # there: its results depend on the tensors' memory alignment (a parameter copied into a new
        # tensor steps differently), which breaks bit-identical resume; foreach is deterministic.
        fused=device.type == "cuda" or None,
    )


def tied_aliases(model: torch.nn.Module) -> dict[str, str]:
    """Each name of a parameter that is registered under an earlier name too (tied input and output
    embeddings) -> that earlier name. From the module, so every rank gets the same answer."""
    first: dict[int, str] = {}
    aliases: dict[str, str] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in first:
            aliases[name] = first[id(param)]
        else:
            first[id(param)] = name
    return aliases


def loss_module(model: torch.nn.Module, config: EngineConfig, hooks_outside: bool = False,
                distillation: ReplayDistillation | None = None) -> CausalLMLoss:
    """The model with its loss, fast path applied as `config` (already resolved by check_engine) says
    (`hooks_outside`: see `fastpath.compile_blocks`), and the job's replay distillation if any."""
    if config.compile:
        compile_blocks(model, hooks_outside)
    return CausalLMLoss(model, use_fused_loss(model, bool(config.fused_loss)), distillation)


class Engine:
    """The operations the training loop needs; see `TorchEngine`, `DeepSpeedEngine` and `FSDPEngine`."""

    device: torch.device
    model: torch.nn.Module
    forward_model: torch.nn.Module
    """The model with its mean loss, `(inputs, labels) -> loss`, wrapped as this engine runs it (DDP,
    DeepSpeed, FSDP): forward-only users (validation) go through it, so sharded weights are gathered."""

    def micro_step(self, inputs: torch.Tensor, labels: torch.Tensor, position_ids: torch.Tensor | None = None,
                   distill_rows: torch.Tensor | None = None) -> torch.Tensor:
        """Forward and backward of one micro-batch; returns the detached loss. `position_ids`
        (document masking) restart at each document, and attention stays inside documents;
        `distill_rows` (bool per row) are the rows the replay distillation term covers."""
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
        """A Hugging Face model folder (safetensors) with the consolidated weights, from rank 0.

        A tied matrix is written once, under its first name: gathered to the CPU its two names no
        longer share memory, and `save_pretrained` would store both (one vocabulary-sized matrix
        too many); `from_pretrained` ties the other name back from the config."""
        state = self.full_state_dict()
        if rank == 0:
            aliases = tied_aliases(self.model)
            self.model.save_pretrained(directory, state_dict={k: v for k, v in state.items() if k not in aliases})

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
