"""Training metrics to the console, `metrics.jsonl` and TensorBoard (rank 0 only).

Per logged step: loss (mean of the window's finite losses), lr, grad_norm, tokens (seen so
far), tokens_per_second (all devices), tokens_per_second_per_device, mfu, peak_memory_mb,
skipped_steps, elapsed_seconds (training wall time, over restarts), eta_seconds,
tokens_by_source and epochs_by_source (from the data stream's position), joules_per_step
(measured on this device where it has an energy counter, `langadapt.train.monitoring.energy`; null
elsewhere). Validation rows (`{"step", "valid": {lang: {loss, bits_per_byte, tokens}},
"valid_seconds"}`) are written when `validate` runs. MFU is computed as in `langadapt.train.flops`:

    MFU = flops_per_token * tokens_per_second_per_device / peak_flops_per_device

with flops_per_token = 4N + 2N_trainable + 12 * layers * d_attn * seq_len (6N for full
training, about 4N with the body frozen); it is null (n/a) on CPU, in fp32 and on devices
without a known peak. Peak memory is the accelerator's max allocated memory, or the process's
peak RSS on CPU.

Time spent checkpointing or validating counts neither towards tokens per second nor towards
joules per step: both measure the training steps. The console gets a rich progress bar on a
terminal, else (Slurm logs) one plain line per logged step with elapsed time and ETA.
"""

from __future__ import annotations

import json
import logging
import math
import resource
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from langadapt.run.layout import ModelStagePaths
from langadapt.train.monitoring.energy import EnergyCounter, energy_counter
from langadapt.train.monitoring.loggers import ScalarLogger, flatten, open_loggers

if TYPE_CHECKING:
    from langadapt.train.config import TrainStageConfig

log = logging.getLogger("langadapt.train")


def peak_memory_mb(device: torch.device) -> float:
    """Peak accelerator memory allocated (torch.cuda also serves ROCm), else peak process RSS."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def _parse(line: str) -> dict:
    """A metrics.jsonl row; a line cut short by a kill counts as never written (step inf)."""
    try:
        row = json.loads(line)
        return row if isinstance(row, dict) and "step" in row else {"step": math.inf}
    except ValueError:
        return {"step": math.inf}


def source_progress(stream: object) -> tuple[dict[str, int], dict[str, float]]:
    """Tokens and passes (epochs) seen per source so far, from the stream's O(1) position.

    Passes are the planned epochs scaled by how much of the plan has been served; streams
    without per-source counts (the synthetic one) give empty dicts.
    """
    state = stream.state_dict() if hasattr(stream, "state_dict") else {}
    counts, targets, plan = state.get("counts", {}), state.get("targets", {}), getattr(stream, "plan", None)
    counts = {name: count for name, count in counts.items() if targets.get(name, 1)}  # weight-0 sources: not shown
    tokens = {name: count * stream.seq_len for name, count in counts.items()}  # seq_len targets a sample
    epochs = {name: plan.source(name).epochs * count / targets[name]
              for name, count in counts.items() if plan is not None and targets.get(name)}
    return tokens, epochs


def human(count: float) -> str:
    """1234567 -> "1.2M": token counts that fit in a log line."""
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(count) >= size:
            return f"{count / size:.1f}{unit}"
    return f"{count:.0f}"


def clock(seconds: float) -> str:
    """Seconds as H:MM:SS (days as hours: a month-long run says 720:00:00)."""
    whole = int(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


@dataclass(frozen=True)
class StepCost:
    """What one optimizer step of a stage is worth, fixed for the stage: tokens/s and MFU come from it."""

    tokens_per_step: int
    """Tokens of one optimizer step over all ranks (global batch x sequence length)."""
    flops_per_token: float
    """Training FLOPs per token of this stage (`langadapt.train.flops.flops_per_token`)."""
    peak_flops: float | None
    """Peak FLOP/s of one device at the stage's precision; None where unknown (MFU is then null)."""
    world_size: int
    device: torch.device


class Metrics:
    """Collects every step, writes every `log_every` steps; use as a context manager.

    Gets the stage config's monitoring slice (steps, log_every, loggers, profile_steps) and the
    stage's StepCost. `stream` (optional) gives the tokens and epochs seen per source; `run_name`
    names the tracker run (`langadapt.train.monitoring.loggers`).
    """

    def __init__(self, out_dir: Path, config: TrainStageConfig, cost: StepCost, *, start_step: int = 0,
                 enabled: bool = True, stream: object = None, run_name: str = "train") -> None:
        self.out_dir, self.total_steps, self.log_every = out_dir, config.steps, config.log_every
        self.tokens_per_step, self.flops_per_token = cost.tokens_per_step, cost.flops_per_token
        self.peak_flops, self.world_size, self.device = cost.peak_flops, cost.world_size, cost.device
        self.start_step, self.enabled = start_step, enabled
        self.stream, self.logger_names, self.run_name = stream, list(config.loggers), run_name
        self.profile_steps, self._profiler = config.profile_steps, None
        self._losses: list[float] = []
        self._window_start = time.perf_counter()
        self._window_steps = 0
        self._progress: Progress | None = None
        self._loggers: list[ScalarLogger] = []
        self._jsonl = None
        self._energy: EnergyCounter | None = None
        self._joules_start = self._joules_total = 0.0
        self._measured_steps = 0
        self._elapsed_before = 0.0  # training time of earlier attempts (a resumed run)
        self._started = time.perf_counter()
        self.last_validation: dict | None = None

    def __enter__(self) -> Metrics:
        if not self.enabled:
            return self
        self.out_dir.mkdir(parents=True, exist_ok=True)
        path = ModelStagePaths(self.out_dir).metrics
        if path.is_file():  # a resumed run: drop rows logged after the checkpoint it resumes from
            kept = [r for r in path.read_text().splitlines() if _parse(r)["step"] <= self.start_step]
            path.write_text("".join(r + "\n" for r in kept))
            self._elapsed_before = max((_parse(r).get("elapsed_seconds") or 0.0 for r in kept), default=0.0)
        self._jsonl = open(path, "a", encoding="utf-8")
        self._loggers = open_loggers(self.logger_names, self.out_dir, self.run_name)
        self._energy = energy_counter(self.device)
        console = Console(stderr=True)
        if console.is_terminal:
            self._progress = Progress(
                TextColumn(f"[bold]{self.run_name}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[info]}"), console=console,
            )
            self._progress.start()
            self._task = self._progress.add_task("train", total=self.total_steps, completed=self.start_step, info="")
        self._started = time.perf_counter()
        self._profiler = self._start_profiler()
        self.start(self.start_step)
        return self

    def _start_profiler(self):
        """torch.profiler over steps [first, last] (those still ahead), traced for TensorBoard/Perfetto.

        The step before `first` is a warm-up (recorded, then dropped) where there is one."""
        if self.profile_steps is None or self.profile_steps[1] <= self.start_step:
            return None
        from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

        first = max(self.profile_steps[0], self.start_step + 1)
        warmup = 1 if first - 1 > self.start_step else 0
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
        trace = tensorboard_trace_handler(str(self.out_dir / "profile"))
        profiler = profile(activities=activities, on_trace_ready=trace,
                           schedule=schedule(wait=first - 1 - self.start_step - warmup, warmup=warmup,
                                             active=self.profile_steps[1] - first + 1, repeat=1))
        profiler.start()
        return profiler

    def __exit__(self, *exc: object) -> None:
        if self._profiler is not None:
            self._profiler.stop()
        if self._progress is not None:
            self._progress.stop()
        if self._jsonl is not None:
            self._jsonl.close()
        for logger in self._loggers:
            logger.close()

    def start(self, step: int) -> None:
        """Reset the timing window (after resume or a checkpoint, whose time is not training)."""
        self._window_start, self._window_steps, self._losses = time.perf_counter(), 0, []
        self._joules_start = self._energy.joules() if self._energy is not None else 0.0
        if self._progress is not None:
            self._progress.update(self._task, completed=step)

    def record(self, step: int, loss: float, lr: float, grad_norm: float, skipped: int) -> dict | None:
        """Account one finished step (1-based); returns the row when this step is logged."""
        self._window_steps += 1
        if self._profiler is not None:
            self._profiler.step()
        if math.isfinite(loss):
            self._losses.append(loss)
        if self._progress is not None:
            self._progress.update(self._task, completed=step)
        if step % self.log_every and step != self.total_steps:
            return None
        now = time.perf_counter()
        elapsed = max(now - self._window_start, 1e-9)
        tps = self._window_steps * self.tokens_per_step / elapsed
        per_device = tps / self.world_size
        mfu = None if self.peak_flops is None else self.flops_per_token * per_device / self.peak_flops
        tokens_by_source, epochs_by_source = source_progress(self.stream)
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
            "elapsed_seconds": self._elapsed_before + now - self._started,
            "eta_seconds": (self.total_steps - step) * elapsed / self._window_steps,
            "joules_per_step": self._window_joules(),
            "tokens_by_source": tokens_by_source,
            "epochs_by_source": epochs_by_source,
        }
        self._write(row)
        self.start(step)
        return row

    def _window_joules(self) -> float | None:
        """Joules per step of this device over the window (None: no counter)."""
        if self._energy is None or not self._window_steps:
            return None
        joules = self._energy.joules() - self._joules_start
        self._joules_total += joules
        self._measured_steps += self._window_steps
        return joules / self._window_steps

    def validate(self, step: int, validation, engine) -> dict | None:
        """Run `validation` when it is due at `step` (every rank: it is collective) and log it.

        Its time and energy are taken out of the current window, like a checkpoint's."""
        if not validation.due(step, self.total_steps):
            return None
        paused, joules = time.perf_counter(), self._energy.joules() if self._energy is not None else 0.0
        result = validation.run(engine)
        self._window_start += time.perf_counter() - paused
        if self._energy is not None:
            self._joules_start += self._energy.joules() - joules
        self.last_validation = {"step": step, **result}
        if self.enabled:
            self._emit(self.last_validation, flatten(result),
                       "valid " + "  ".join(f"{lang} loss {m['loss']:.4f} bpb {m['bits_per_byte']:.4f}"
                                            for lang, m in result["valid"].items()))
        return result

    def summary(self) -> dict:
        """What the stage summary reports: measured energy and the last validation."""
        energy = {}
        if self._energy is not None and self._measured_steps:
            per_step = self._joules_total / self._measured_steps
            energy = {"energy_source": self._energy.source, "joules_per_step_per_device": per_step,
                      "joules_per_step": per_step * self.world_size}
        return {**energy, "validation": self.last_validation}

    def _write(self, row: dict) -> None:
        if not self.enabled:
            return
        mfu = "n/a" if row["mfu"] is None else f"{100 * row['mfu']:.1f}%"
        info = f"loss {row['loss']:.4f} lr {row['lr']:.2e} {row['tokens_per_second']:,.0f} tok/s mfu {mfu}"
        if row["joules_per_step"] is not None:
            info += f" {row['joules_per_step']:,.0f} J/step"
        sources = " ".join(f"{name} {human(tokens)}" + (f" ({row['epochs_by_source'][name]:.2f} ep)"
                                                         if name in row["epochs_by_source"] else "")
                           for name, tokens in row["tokens_by_source"].items())
        if self._progress is not None:
            self._progress.update(self._task, info=f"{info} | {sources}" if sources else info)
            return self._emit(row, flatten(row, "train"), None)
        timing = f"elapsed {clock(row['elapsed_seconds'])} eta {clock(row['eta_seconds'])}"
        self._emit(row, flatten(row, "train"),
                   f"step {row['step']}/{self.total_steps} {info} | {timing}" + (f" | {sources}" if sources else ""))

    def _emit(self, row: dict, scalars: dict[str, float], line: str | None) -> None:
        """One row to metrics.jsonl (strict JSON: NaN/inf become null), the loggers and the console."""
        self._jsonl.write(json.dumps(_finite(row)) + "\n")
        self._jsonl.flush()
        for logger in self._loggers:
            logger.log(scalars, row["step"])
        if line is None:
            return
        if self._progress is not None:
            self._progress.console.print(f"step {row['step']} {line}")
        else:
            log.info("%s", line)


def _finite(value):
    """NaN and inf (also nested) as None."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return None if isinstance(value, float) and not math.isfinite(value) else value
