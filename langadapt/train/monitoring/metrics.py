"""Training metrics: the step meter that builds each logged row, metrics.jsonl, the console.

Three callbacks (`langadapt.train.monitoring.callbacks`), rank 0 only. Per logged step
(`StepMeter`): loss (mean of the window's finite losses), lr, grad_norm, tokens (seen so far),
tokens_per_second (all devices), tokens_per_second_per_device, mfu, peak_memory_mb,
skipped_steps, elapsed_seconds (training wall time, over restarts), eta_seconds,
tokens_by_source and epochs_by_source (from the data stream's position), joules_per_step
(measured on this device where it has an energy counter, `langadapt.train.monitoring.energy`; null
elsewhere). Validation rows (`{"step", "valid": {lang: {loss, bits_per_byte, tokens}},
"valid_seconds"}`) come from `Validation`, which `fit` calls; `MetricsFile` writes every row. MFU is
computed as in `langadapt.train.flops`:

    MFU = flops_per_token * tokens_per_second_per_device / peak_flops_per_device

with flops_per_token = 4N + 2N_trainable + 12 * layers * d_attn * seq_len (6N for full
training, about 4N with the body frozen); it is null (n/a) on CPU, in fp32 and on devices
without a known peak. Peak memory is the accelerator's max allocated memory, or the process's
peak RSS on CPU.

Time spent checkpointing, validating or logging counts neither towards tokens per second nor
towards joules per step: both measure the optimizer steps themselves (from `on_step_start` to
`on_step`). The console gets a rich progress bar on a terminal, else (Slurm logs) one plain line
per logged step with elapsed time and ETA.
"""

from __future__ import annotations

import json
import logging
import math
import resource
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from langadapt.run.metrics_log import kept_lines, read_metrics
from langadapt.runtime.logs import clock, terminal_bar
from langadapt.train.monitoring.callbacks import Callback, StageStart, StepRecord
from langadapt.train.monitoring.energy import EnergyCounter, energy_counter

if TYPE_CHECKING:
    from langadapt.data.stream import TokenStream

log = logging.getLogger("langadapt.train")


def peak_memory_mb(device: torch.device) -> float:
    """Peak accelerator memory allocated (torch.cuda also serves ROCm), else peak process RSS."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def human(count: float) -> str:
    """1234567 -> "1.2M": token counts that fit in a log line."""
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(count) >= size:
            return f"{count / size:.1f}{unit}"
    return f"{count:.0f}"


class LossWindow:
    """The losses since the last logged step: what a metrics.jsonl row's `loss` is the mean of.

    The loop keeps the one window of a stage and hands each closed window's mean to the callbacks on
    the step record (`StepRecord.window_loss`): `StepMeter` writes it as the curve's point, and its
    last one is `TrainResult.final_loss` (the stage summary's `final_loss`, which the model card
    prints), so the two cannot differ (the last step's loss alone is one batch's, and would differ
    from the last point of the curve the report draws). Steps with a non-finite loss are left out; a
    window of none has no mean (NaN)."""

    def __init__(self, log_every: int, total_steps: int) -> None:
        self.log_every, self.total_steps = log_every, total_steps
        self.losses: list[float] = []
        self.last: float | None = None
        """The mean of the last window closed; None before the first."""

    def add(self, step: int, loss: float) -> float | None:
        """Add step `step`'s loss; on a logged step (every `log_every`-th, and the last) close the
        window and return its mean (NaN when every step in it was skipped), else None."""
        if math.isfinite(loss):
            self.losses.append(loss)
        if step % self.log_every and step != self.total_steps:
            return None
        self.last = sum(self.losses) / len(self.losses) if self.losses else float("nan")
        self.losses = []
        return self.last


class StepMeter(Callback):
    """Builds the training row of each logged step (the records that carry a `window_loss`: every
    `log_every`-th step and the last): the window's mean loss, throughput, MFU, memory, energy, ETA
    and the tokens seen per source.

    `stream` (optional) gives the tokens and epochs seen per source (`TokenStream.progress`);
    `previous` is the stage's metrics.jsonl, whose last kept `elapsed_seconds` a resumed stage continues from."""

    def __init__(self, stream: TokenStream | None = None, previous: Path | None = None) -> None:
        self.stream, self.previous = stream, previous
        self._energy: EnergyCounter | None = None
        self._measured_steps, self._measured_seconds, self._measured_joules = 0, 0.0, 0.0

    def on_stage_start(self, start: StageStart) -> None:
        self.cost, self.total_steps = start.cost, start.total_steps
        kept = read_metrics(self.previous).train if self.previous is not None else []
        self._elapsed_before = max((r.get("elapsed_seconds") or 0.0 for r in kept if r["step"] <= start.step),
                                   default=0.0)
        self._energy = energy_counter(start.cost.device)
        self._started = time.perf_counter()
        self._new_window()

    def _new_window(self) -> None:
        self._steps, self._seconds, self._joules = 0, 0.0, 0.0

    def _joules_now(self) -> float:
        return self._energy.joules() if self._energy is not None else 0.0

    def on_step_start(self, step: int) -> None:
        self._step_began, self._joules_began = time.perf_counter(), self._joules_now()

    def on_step(self, record: StepRecord) -> dict | None:
        now = time.perf_counter()
        self._steps += 1
        self._seconds += now - self._step_began
        self._joules += self._joules_now() - self._joules_began
        if record.window_loss is None:
            return None
        row = self._row(record, now)
        self._measured_steps += self._steps
        self._measured_seconds += self._seconds
        self._measured_joules += self._joules
        self._new_window()
        return row

    def _row(self, record: StepRecord, now: float) -> dict:
        seconds = max(self._seconds, 1e-9)
        tps = self._steps * self.cost.tokens_per_step / seconds
        per_device = tps / self.cost.world_size
        peak = self.cost.peak_flops
        tokens_by_source, epochs_by_source = self.stream.progress() if self.stream is not None else ({}, {})
        return {
            "step": record.step,
            "loss": record.window_loss,
            "lr": record.lr,
            "grad_norm": record.grad_norm,
            "tokens": record.step * self.cost.tokens_per_step,
            "tokens_per_second": tps,
            "tokens_per_second_per_device": per_device,
            "mfu": None if peak is None else self.cost.flops_per_token * per_device / peak,
            "peak_memory_mb": peak_memory_mb(self.cost.device),
            "skipped_steps": record.skipped,
            "elapsed_seconds": self._elapsed_before + now - self._started,
            "eta_seconds": (self.total_steps - record.step) * seconds / self._steps,
            "joules_per_step": None if self._energy is None else self._joules / self._steps,
            "tokens_by_source": tokens_by_source,
            "epochs_by_source": epochs_by_source,
        }

    def on_stage_end(self, summary: dict) -> None:
        """The stage's training wall time (over restarts), its mean tokens/s over the steps this
        attempt measured, and the measured energy per step where a counter exists."""
        summary["elapsed_seconds"] = self._elapsed_before + time.perf_counter() - self._started
        if self._measured_steps:
            summary["tokens_per_second"] = (self._measured_steps * self.cost.tokens_per_step
                                            / max(self._measured_seconds, 1e-9))
        if self._energy is not None and self._measured_steps:
            per_step = self._measured_joules / self._measured_steps
            summary.update(energy_source=self._energy.source, joules_per_step_per_device=per_step,
                           joules_per_step=per_step * self.cost.world_size)


class MetricsFile(Callback):
    """Every row to `path` (metrics.jsonl), strict JSON (NaN/inf become null), flushed per row:
    a kill loses at most the row being written, which a resume reads as never written."""

    def __init__(self, path: Path) -> None:
        self.path, self._file = path, None

    def on_stage_start(self, start: StageStart) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.is_file():
            self.path.write_text("".join(line + "\n" for line in kept_lines(self.path, start.step)))
        self._file = open(self.path, "a", encoding="utf-8")

    def on_log(self, row: dict) -> None:
        self._file.write(json.dumps(_finite(row)) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


class ConsoleProgress(Callback):
    """A rich progress bar on a terminal, else (Slurm logs) one plain line per logged step with
    elapsed time and ETA; validations as one line each."""

    def __init__(self, run_name: str) -> None:
        self.run_name, self._progress = run_name, None

    def on_stage_start(self, start: StageStart) -> None:
        self.total_steps = start.total_steps
        bar = terminal_bar(self.run_name, "train", start.total_steps, start.step)
        if bar is not None:
            self._progress, self._task = bar

    def on_step(self, record: StepRecord) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=record.step)

    def on_log(self, row: dict) -> None:
        if "valid" in row:
            return self._say(row["step"], "valid " + "  ".join(
                f"{lang} loss {m['loss']:.4f} bpb {m['bits_per_byte']:.4f}" for lang, m in row["valid"].items()))
        mfu = "n/a" if row["mfu"] is None else f"{100 * row['mfu']:.1f}%"
        info = f"loss {row['loss']:.4f} lr {row['lr']:.2e} {row['tokens_per_second']:,.0f} tok/s mfu {mfu}"
        if row["joules_per_step"] is not None:
            info += f" {row['joules_per_step']:,.0f} J/step"
        sources = " ".join(f"{name} {human(tokens)}" + (f" ({row['epochs_by_source'][name]:.2f} ep)"
                                                         if name in row["epochs_by_source"] else "")
                           for name, tokens in row["tokens_by_source"].items())
        if self._progress is not None:  # the bar's own line, not one more printed line per step
            self._progress.update(self._task, info=f"{info} | {sources}" if sources else info)
            return
        timing = f"elapsed {clock(row['elapsed_seconds'])} eta {clock(row['eta_seconds'])}"
        log.info("%s", f"step {row['step']}/{self.total_steps} {info} | {timing}" + (f" | {sources}" if sources else ""))

    def _say(self, step: int, line: str) -> None:
        if self._progress is not None:
            self._progress.console.print(f"step {step} {line}")
        else:
            log.info("%s", line)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()


def _finite(value):
    """NaN and inf (also nested) as None."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return None if isinstance(value, float) and not math.isfinite(value) else value
