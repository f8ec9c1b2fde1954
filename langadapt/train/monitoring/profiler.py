"""A torch profiler trace of chosen steps (`stage.profile_steps`), for TensorBoard or Perfetto."""

from __future__ import annotations

from pathlib import Path

from langadapt.train.monitoring.callbacks import Callback, StageStart, StepRecord


class StepProfiler(Callback):
    """torch.profiler over steps [first, last] (those still ahead of a resume), traced into
    `out_dir/profile`. The step before `first` is a warm-up (recorded, then dropped) where there is one."""

    def __init__(self, profile_steps: tuple[int, int], out_dir: Path) -> None:
        self.profile_steps, self.out_dir, self._profiler = profile_steps, out_dir, None

    def on_stage_start(self, start: StageStart) -> None:
        first, last = self.profile_steps
        if last <= start.step:
            return
        from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

        first = max(first, start.step + 1)
        warmup = 1 if first - 1 > start.step else 0
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if start.cost.device.type == "cuda" else [])
        trace = tensorboard_trace_handler(str(self.out_dir / "profile"))
        self._profiler = profile(activities=activities, on_trace_ready=trace,
                                 schedule=schedule(wait=first - 1 - start.step - warmup, warmup=warmup,
                                                   active=last - first + 1, repeat=1))
        self._profiler.start()

    def on_step(self, record: StepRecord) -> None:
        if self._profiler is not None:
            self._profiler.step()

    def close(self) -> None:
        if self._profiler is not None:
            self._profiler.stop()
