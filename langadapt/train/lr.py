"""Learning-rate schedules as pure functions of the step.

Every schedule starts with a linear warm-up: step s < W gets peak * (s + 1) / W, so step 0 is
small but not zero (a zero-LR step would waste a batch) and step W - 1 reaches the peak. After
warm-up, with progress p = (s - W) / (T - W) in [0, 1):

- constant: peak (NorMistral stage 1: 1e-4 after 10 warm-up steps);
- cosine:   min + (peak - min) * (1 + cos(pi * p)) / 2;
- linear:   peak - (peak - min) * p;
- wsd:      warmup-stable-decay (MiniCPM, Hagele et al. 2024): peak until the last
            `decay_fraction` of all steps, then linear to min. The decay is placed from the
            stage's `steps`; a changed `steps` changes the stage's fingerprint and trains it
            again from step 0 (the method's longer stable phase resumed from a checkpoint is not
            offered here).

min = peak * min_lr_ratio. Stage 2 re-warms simply because it is a new run of the same
function from its own step 0 (the recommended re-warm/re-decay for continual pretraining,
Ibrahim et al. 2024).
"""

from __future__ import annotations

import math

from langadapt.recipe.train import ScheduleConfig


def warmup(step: int, warmup_steps: int, peak: float) -> float:
    """LR during warm-up (linear; step 0 gets peak / warmup_steps)."""
    return peak * (step + 1) / warmup_steps


def cosine(progress: float, peak: float, floor: float) -> float:
    """Half a cosine from peak (progress 0) to floor (progress 1)."""
    return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def linear(progress: float, peak: float, floor: float) -> float:
    """Straight line from peak (progress 0) to floor (progress 1)."""
    return peak - (peak - floor) * progress


def wsd(step: int, total_steps: int, peak: float, floor: float, decay_fraction: float) -> float:
    """Warmup-stable-decay after warm-up: flat at peak, then linear over the last fraction."""
    decay_steps = max(1, round(decay_fraction * total_steps))
    decay_start = total_steps - decay_steps
    if step < decay_start:
        return peak
    return linear((step - decay_start) / decay_steps, peak, floor)


def lr_at(step: int, schedule: ScheduleConfig, peak: float, total_steps: int) -> float:
    """The learning rate of optimizer step `step` (0-based) of a run of `total_steps`."""
    if step < schedule.warmup_steps:
        return warmup(step, schedule.warmup_steps, peak)
    floor = peak * schedule.min_lr_ratio
    if schedule.kind == "constant":
        return peak
    if schedule.kind == "wsd":
        return wsd(step, total_steps, peak, floor, schedule.decay_fraction)
    progress = (step - schedule.warmup_steps) / max(1, total_steps - schedule.warmup_steps)
    if schedule.kind == "cosine":
        return cosine(progress, peak, floor)
    return linear(progress, peak, floor)
