"""Resumable checkpoints, written atomically, found again automatically.

Layout under `<stage>/checkpoints/`:

    step_00000500/            one complete checkpoint
      model.safetensors, optimizer.pt   (torch engine)  or  deepspeed/...  (DeepSpeed engine)
                              or  fsdp/  (FSDP2: torch.distributed.checkpoint shards + .metadata)
      trainer_state.json      step, skipped steps, data-stream position, ... (rank 0)
      rng_rank<R>.pt          python / numpy / torch (CPU and accelerator) RNG states per rank
    latest                    the name of the newest COMPLETE checkpoint

Every rank writes into `step_XXXXXXXX.tmp/` and fsyncs it; after a barrier rank 0 renames it and
only then rewrites `latest` (write-to-temp + fsync + os.replace, so `latest` is never half-written,
and the directory is fsynced so the renames survive a node crash, not only a killed process). A
folder is deleted (pruned, or replaced by a re-save of its step) by renaming it to `.del` first:
so a folder named `step_XXXXXXXX` is always complete. A crash at any point leaves `latest` naming
a complete checkpoint, and the stale `.tmp`/`.del` folders are removed on the next start;
tests/train/test_train_checkpoint_kill.py kills a run at random points of its writes. The data stream's state is a few integers, so resuming skips the
consumed data in O(1) instead of re-reading it. Needs a filesystem all ranks share (the norm
on clusters: Lustre, GPFS).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
import torch.distributed as torch_dist

from langadapt.errors import LangadaptError
from langadapt.inputs.model_folder import is_model_folder
from langadapt.ioerrors import writing
from langadapt.recipe.train import CheckpointConfig
from langadapt.run.layout import (
    LATEST,
    STEP_DIR,
    STEP_PREFIX,
    TRAINER_STATE,
    WEIGHTS,
    latest_checkpoint,
    step_dir_name,
)
from langadapt.train.engines.base import Engine
from langadapt.train.engines.deepspeed_engine import TAG as DEEPSPEED_TAG
from langadapt.train.engines.deepspeed_engine import consolidated_weights as deepspeed_weights
from langadapt.train.engines.fsdp_engine import TAG as FSDP_TAG
from langadapt.train.engines.fsdp_engine import consolidated_weights as fsdp_weights


class Stateful(Protocol):
    """What a checkpoint needs from the data stream."""

    def state_dict(self) -> dict: ...
    def load_state_dict(self, state: dict) -> None: ...


@dataclass
class TrainState:
    """The loop's own counters, saved in trainer_state.json."""

    step: int = 0
    """Optimizer steps done (including skipped ones: their data was consumed)."""
    skipped: int = 0
    """Steps skipped because the loss or gradient norm was not finite."""
    nonfinite_in_row: int = 0
    """Current run of consecutive skipped steps."""
    last_loss: float | None = None
    """Mean loss of the last finite step."""


def rng_state() -> dict[str, Any]:
    """Every RNG a training step may draw from (dropout, sampling), for bit-identical resume."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _barrier() -> None:
    if torch_dist.is_initialized() and torch_dist.get_world_size() > 1:
        torch_dist.barrier()


def _discard(path: Path) -> None:
    """Delete a checkpoint folder so that no folder named `step_N` is ever partly deleted."""
    doomed = path.with_name(path.name + ".del")
    shutil.rmtree(doomed, ignore_errors=True)
    os.replace(path, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def _fsync_files(folder: Path) -> None:
    """Flush every file under `folder` (a killed process loses nothing, a crashed node would)."""
    for path in folder.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def _fsync_dir(folder: Path) -> None:
    """Make the renames inside `folder` durable (POSIX: a rename is on disk once its directory is)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Checkpointer:
    """Decides when to save, saves atomically, keeps the last K, finds the latest complete one."""

    def __init__(self, root: Path, config: CheckpointConfig, rank: int = 0) -> None:
        self.root, self.config, self.rank = root, config, rank
        self._last_save = time.monotonic()
        if rank == 0:
            root.mkdir(parents=True, exist_ok=True)
            for stale in [*root.glob(f"{STEP_PREFIX}*.tmp"), *root.glob(f"{STEP_PREFIX}*.del")]:  # never complete, never named
                shutil.rmtree(stale, ignore_errors=True)
        _barrier()

    def latest(self) -> Path | None:
        """The checkpoint `latest` names, or None for a fresh start (see `latest_checkpoint`)."""
        return latest_checkpoint(self.root)

    def due(self, step: int, total_steps: int) -> bool:
        """A step-based (or final, unless `at_end` is off) checkpoint is due after `step` steps."""
        every = self.config.every_steps
        return (step == total_steps and self.config.at_end) or (every is not None and step % every == 0)

    def time_due(self) -> float:
        """1.0 when `every_minutes` passed since the last save (rank 0's clock decides)."""
        minutes = self.config.every_minutes
        if self.rank != 0 or minutes is None:  # summed over ranks: one clock, one vote
            return 0.0
        return float(time.monotonic() - self._last_save >= 60 * minutes)

    def save(self, state: TrainState, engine: Engine, stream: Stateful) -> Path:
        """Write checkpoint `step_<step>` on every rank; returns its final path."""
        name = step_dir_name(state.step)
        final, tmp = self.root / name, self.root / f"{name}.tmp"
        if self.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        _barrier()
        with writing(tmp, "checkpoint"):  # a full disk: one line naming the folder, not a SafetensorError
            engine.save(tmp)
            torch.save(rng_state(), tmp / f"rng_rank{self.rank}.pt")
            if self.rank == 0:
                trainer = {**asdict(state), "stream": stream.state_dict(), "saved_at": time.time()}
                (tmp / TRAINER_STATE).write_text(json.dumps(trainer, indent=1, default=int))
            _fsync_files(tmp)  # on disk before the rename makes them "complete"
        _barrier()
        if self.rank == 0:
            self._publish(tmp, final)
        _barrier()
        self._last_save = time.monotonic()
        return final

    def _publish(self, tmp: Path, final: Path) -> None:
        """Rename into place, then point `latest` at it, then prune: each step atomic.

        A re-save of the same step (the final one after a resume) moves the old folder aside
        first: deleting it in place would leave `latest` naming a half-deleted checkpoint."""
        if final.exists():
            _discard(final)
        os.replace(tmp, final)
        _fsync_dir(self.root)
        pointer = self.root / f"{LATEST}.tmp"
        with open(pointer, "w") as f:
            f.write(final.name)
            f.flush()
            os.fsync(f.fileno())
        os.replace(pointer, self.root / LATEST)
        _fsync_dir(self.root)
        steps = sorted((int(m.group(1)), p) for p in self.root.iterdir() if (m := STEP_DIR.match(p.name)))
        for _, old in steps[: -self.config.keep_last]:
            if old != final:
                _discard(old)

    def load(self, path: Path, engine: Engine, stream: Stateful) -> TrainState:
        """Restore weights, optimizer, RNG and the data position from a complete checkpoint."""
        trainer = json.loads((path / TRAINER_STATE).read_text())
        # The data position first: a stream planned for another global batch (another world size)
        # is refused in a second, before the weights and optimizer state are read.
        stream.load_state_dict(trainer.pop("stream"))
        engine.load(path)
        rng = path / f"rng_rank{self.rank}.pt"
        if rng.is_file():  # absent when resuming with more ranks than were saved
            set_rng_state(torch.load(rng, weights_only=False))
        fields = TrainState.__dataclass_fields__
        return TrainState(**{k: v for k, v in trainer.items() if k in fields})


def checkpoint_model(checkpoint: Path, config_from: Path, out: Path) -> Path:
    """A training checkpoint's weights as a Hugging Face model folder in `out`; returns `out`.

    `checkpoint` is one `step_N` folder, or a stage's `checkpoints/` folder (its latest complete
    checkpoint). Checkpoints hold weights and optimizer state but no config: `config_from` is a
    model folder of the same architecture (the stage's starting or final model) whose config,
    generation config and tokenizer files are copied beside the weights. All three engines' checkpoints
    are read in this process, on CPU, with no process group: torch-engine ones as they are, FSDP ones
    from their DCP shards, DeepSpeed ones (ZeRO 0-3, any world size) joined from their ZeRO
    partitions by DeepSpeed's own `zero_to_fp32` functions, frozen parameters included (fp32).
    """
    from huggingface_hub import save_torch_state_dict
    from safetensors.torch import load_file

    checkpoint, config_from, out = Path(checkpoint), Path(config_from), Path(out)
    step = latest_checkpoint(checkpoint) if not (checkpoint / TRAINER_STATE).is_file() else checkpoint
    if step is None:
        raise LangadaptError(f"{checkpoint}: no complete checkpoint (step_N folder with trainer_state.json)")
    weights = step / WEIGHTS
    if (step / FSDP_TAG).is_dir():
        state = fsdp_weights(step / FSDP_TAG)
    elif (step / DEEPSPEED_TAG).is_dir():
        state = deepspeed_weights(step / DEEPSPEED_TAG)
    elif weights.is_file():
        state = load_file(weights)
    else:
        raise LangadaptError(f"{step}: no {WEIGHTS}, {FSDP_TAG}/ or {DEEPSPEED_TAG}/ folder: not a langadapt checkpoint")
    if not is_model_folder(config_from):
        raise LangadaptError(f"{config_from}: no config.json; pass the stage's model folder as config_from")
    out.mkdir(parents=True, exist_ok=True)
    for path in config_from.iterdir():  # config, generation config, tokenizer: everything but weights
        if path.is_file() and not path.name.startswith((WEIGHTS, "model-", "pytorch_model")):
            shutil.copy2(path, out / path.name)
    save_torch_state_dict(state, out)  # shards big models, handles tied tensors
    return out
