"""`train_rows: new`: the rows copied from the base keep its values, bit for bit; the new rows train.

Which rows are shared is the embeddings stage's record (`embeddings.row_plan.SharedRows`). The
mechanism is one operation, `RowFreeze.zero_shared`: the gradient rows of the input embedding
and of the LM head (one matrix when tied) are set to zero before clipping and the optimizer, so
the gradient norm counts the new rows only. Each engine applies it where its gradients are
whole before they reach clipping:
- torch (and DDP): on `p.grad` in `step`, after the all-reduce, before clipping;
- DeepSpeed ZeRO 0-3: in a tensor hook on the parameter (`register_hooks`), which autograd runs
  before the gradient is accumulated, so before DeepSpeed's own post-accumulation hooks copy it
  into its reduce buckets (by `step`, ZeRO-2's gradients no longer live in `p.grad`); under
  ZeRO-3 too the hook gets the whole matrix's gradient (the weight is gathered for its backward)
  before it is reduce-scattered;
- FSDP2: on the local shard of the DTensor `p.grad` in `step`, before clipping (rows sharded on
  dim 0; `_local_rows` finds the shard's first row).

A zero gradient is not enough on its own: AdamW's decoupled weight decay, `p *= 1 - lr * wd`,
moves every row it holds. Exempting the masked matrices from decay (`TrainStageConfig.
optimizer_in_force`, so every engine's optimizer is built that way) is the exact choice that
works for every engine: with gradients always zero, Adam's moments of those rows stay exactly 0,
their update is 0 / (sqrt(0) + eps) = 0, and a multiplication by 1 - lr * 0 = 1 leaves them
unchanged. Restoring the rows after each step instead would have to reach into DeepSpeed's flat
fp32 master partitions and FSDP's shards (and the checkpoints written from them) separately,
engine by engine; a per-row decay is impossible under ZeRO, whose optimizer sees flat buffers.
The price: the new rows are not decayed either.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from langadapt.embeddings.row_plan import SharedRows
from langadapt.errors import LangadaptError
from langadapt.train.policy import TrainableParams


class RowFreeze:
    """Zeroes the shared rows' gradients of the trainable embedding matrices (module docstring)."""

    def __init__(self, selection: TrainableParams, shared: SharedRows) -> None:
        self.selection, self.shared = selection, shared
        self._ids: dict[torch.device, torch.Tensor] = {}
        self._hooks: list[torch.utils.hooks.RemovableHandle] = []

    @classmethod
    def build(cls, selection: TrainableParams, train_rows: str, shared: SharedRows | None,
              stage_name: str) -> RowFreeze | None:
        """The freeze `train_rows` asks for (None for all); refuses what it cannot apply to."""
        if train_rows == "all":
            return None
        key = f"{stage_name}.train_rows"
        if shared is None:
            raise LangadaptError(f"{key}: new, but the embeddings stage recorded no shared rows (init: scratch, or "
                                 "an embeddings stage older than this option: run it again)")
        freeze = cls(selection, shared)
        if not freeze.params:
            raise LangadaptError(f"{key}: new, but no embedding or head matrix is trainable ({stage_name}.trainable)")
        for param in freeze.params:
            rows = getattr(param, "ds_shape", param.shape)[0]  # ZeRO-3 loads it partitioned: [0] here
            if rows != shared.rows:
                raise LangadaptError(f"{key}: new, but the model's embedding matrices have {rows} rows and "
                                     f"the embeddings stage recorded shared rows of a {shared.rows}-row matrix")
        return freeze

    @property
    def params(self) -> list[torch.nn.Parameter]:
        """The trainable embedding/head matrices, read at each call: FSDP replaces the parameters."""
        return [p for name, p in self.selection.named if name in self.selection.embedding_names]

    def zero_shared(self) -> None:
        """Zero the shared rows of each matrix's gradient in place (plain tensor or DTensor shard)."""
        for param in self.params:
            if param.grad is not None:
                local = param.grad.to_local() if hasattr(param.grad, "to_local") else param.grad
                self._zero_rows(local, _local_rows(param.grad))

    def register_hooks(self) -> None:
        """Zero the shared rows of every gradient as autograd produces it (engines that take the
        gradient out of `p.grad` before `step`: DeepSpeed). `remove_hooks` undoes it."""
        for param in self.params:
            self._hooks.append(param.register_hook(self._masked))

    def remove_hooks(self) -> None:
        """The model outlives the engine (a later stage in the same process trains all its rows)."""
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()

    def _masked(self, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.clone()
        self._zero_rows(grad, range(grad.shape[0]))
        return grad

    def _zero_rows(self, grad: torch.Tensor, rows: range) -> None:
        """Zero the shared rows that fall in `rows` (the global rows `grad` holds, in order)."""
        ids = self._device_ids(grad.device)
        local = ids[(ids >= rows.start) & (ids < rows.stop)] - rows.start
        grad.index_fill_(0, local, 0)  # not a multiplication: an inf there would become NaN

    def _device_ids(self, device: torch.device) -> torch.Tensor:
        if device not in self._ids:
            self._ids[device] = torch.tensor(self.shared.ids, dtype=torch.long, device=device)
        return self._ids[device]


def _local_rows(grad: torch.Tensor) -> range:
    """The global rows this process holds of `grad`: all of a plain tensor; of a DTensor sharded on
    dim 0 over a 1-D mesh (FSDP2's layout), `torch.chunk`'s share of this rank (DTensor's rule)."""
    rows = grad.shape[0]
    if not hasattr(grad, "to_local"):
        return range(rows)
    from torch.distributed.tensor import Shard

    placements: Sequence = grad.placements
    if len(placements) != 1 or placements[0] != Shard(0):
        raise LangadaptError(f"train_rows: new expects embedding gradients sharded on rows, got {placements}")
    mesh = grad.device_mesh
    chunk = -(-rows // mesh.size())
    start = min(mesh.get_local_rank() * chunk, rows)
    local = grad.to_local().shape[0]
    if local != min(chunk, rows - start):  # another sharding rule: never zero the wrong rows
        raise LangadaptError(f"train_rows: new: a {local}-row shard at row {start} of {rows} is not torch.chunk's")
    return range(start, start + local)
