"""Training metrics to the console, `metrics.jsonl` and TensorBoard (rank 0 only).

Per logged step: loss (mean of the window's finite losses), lr, grad_norm, tokens (seen so
far), tokens_per_second (all devices), tokens_per_second_per_device, mfu, peak_memory_mb,
skipped_steps. MFU is computed as in `langadapt.train.flops`:

    MFU = flops_per_token * tokens_per_second_per_device / peak_flops_per_device

with flops_per_token = 4N + 2N_trainable + 12 * layers * d_attn * seq_len (6N for full
training, about 4N with the body frozen); it is null (n/a) on CPU, in fp32 and on devices
without a known peak. Peak memory is the accelerator's max allocated memory, or the process's
peak RSS on CPU.
"""

from __future__ import annotations

import json
import logging
import math
import resource
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

log = logging.getLogger("langadapt.train")


def peak_memory_mb(device: torch.device) -> float:
    """Peak accelerator memory allocated (torch.cuda also serves ROCm), else peak process RSS."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def _step_of(line: str) -> float:
    """The step of a metrics.jsonl row; a line cut short by a kill counts as never written."""
    try:
        return json.loads(line)["step"]
    except (ValueError, KeyError):
        return math.inf


class Metrics:
    """Collects every step, writes every `log_every` steps; use as a context manager."""

    def __init__(
        self,
        out_dir: Path,
        total_steps: int,
        log_every: int,
        tokens_per_step: int,
        flops_per_token: float,
        peak_flops: float | None,
        world_size: int,
        device: torch.device,
        start_step: int = 0,
        enabled: bool = True,
    ) -> None:
        self.out_dir, self.total_steps, self.log_every = out_dir, total_steps, log_every
        self.tokens_per_step, self.flops_per_token = tokens_per_step, flops_per_token
        self.peak_flops, self.world_size, self.device = peak_flops, world_size, device
        self.start_step, self.enabled = start_step, enabled
        self._losses: list[float] = []
        self._window_start = time.perf_counter()
        self._window_steps = 0
        self._progress: Progress | None = None
        self._writer = None
        self._jsonl = None

    def __enter__(self) -> Metrics:
        if not self.enabled:
            return self
        self.out_dir.mkdir(parents=True, exist_ok=True)
        path = self.out_dir / "metrics.jsonl"
        if path.is_file():  # a resumed run: drop rows logged after the checkpoint it resumes from
            kept = [r for r in path.read_text().splitlines() if _step_of(r) <= self.start_step]
            path.write_text("".join(r + "\n" for r in kept))
        self._jsonl = open(path, "a", encoding="utf-8")
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(str(self.out_dir / "tensorboard"))
        console = Console(stderr=True)
        if console.is_terminal:
            self._progress = Progress(
                TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                TextColumn("{task.fields[info]}"), console=console,
            )
            self._progress.start()
            self._task = self._progress.add_task("train", total=self.total_steps, info="")
        self.start(self.start_step)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
        for handle in (self._jsonl, self._writer):
            if handle is not None:
                handle.close()

    def start(self, step: int) -> None:
        """Reset the timing window (after resume or a checkpoint, whose time is not training)."""
        self._window_start, self._window_steps, self._losses = time.perf_counter(), 0, []
        if self._progress is not None:
            self._progress.update(self._task, completed=step)

    def record(self, step: int, loss: float, lr: float, grad_norm: float, skipped: int) -> dict | None:
        """Account one finished step (1-based); returns the row when this step is logged."""
        self._window_steps += 1
        if math.isfinite(loss):
            self._losses.append(loss)
        if self._progress is not None:
            self._progress.update(self._task, completed=step)
        if step % self.log_every and step != self.total_steps:
            return None
        elapsed = max(time.perf_counter() - self._window_start, 1e-9)
        tps = self._window_steps * self.tokens_per_step / elapsed
        per_device = tps / self.world_size
        mfu = None if self.peak_flops is None else self.flops_per_token * per_device / self.peak_flops
        row = {
            "step": step,
            "loss": sum(self._losses) / len(self._losses) if self._losses else float("nan"),
            "lr": lr,
            "grad_norm": grad_norm,
            "tokens": step * self.tokens_per_step,
            "tokens_per_second": tps,
            "tokens_per_second_per_device": per_device,
            "mfu": mfu,
            "peak_memory_mb": peak_memory_mb(self.device),
            "skipped_steps": skipped,
        }
        self._write(row)
        self.start(step)
        return row

    def _write(self, row: dict) -> None:
        if not self.enabled:
            return
        finite = {k: v if not isinstance(v, float) or math.isfinite(v) else None for k, v in row.items()}
        self._jsonl.write(json.dumps(finite) + "\n")  # strict JSON: NaN/inf become null
        self._jsonl.flush()
        for key, value in row.items():
            if key != "step" and value is not None and math.isfinite(value):
                self._writer.add_scalar(f"train/{key}", value, row["step"])
        mfu = "n/a" if row["mfu"] is None else f"{100 * row['mfu']:.1f}%"
        info = f"loss {row['loss']:.4f} lr {row['lr']:.2e} {row['tokens_per_second']:,.0f} tok/s mfu {mfu}"
        if self._progress is not None:
            self._progress.update(self._task, info=info)
        else:
            log.info("step %d/%d %s", row["step"], self.total_steps, info)
