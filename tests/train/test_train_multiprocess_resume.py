"""A 2-rank ZeRO-2 (and ZeRO-3 fast-path) run SIGKILLed at a random step and restarted ends where an uninterrupted run ends.

The kill takes down torchrun and both workers at once (a node failure); the restart is the
same command, and `fit` resumes by itself from the latest complete checkpoint (weights,
optimizer, RNG and the data position, saved every 2 steps). The reference is one plain process
running all steps: the resumed 2-rank run must match it within the multi-rank tolerances of
tests/helpers/multiproc.py, so this checks resume and multi-rank equivalence together. (The
single-process kill tests, bit-identical, are in test_train_resume*.py.)
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from helpers import multiproc as mp

pytestmark = pytest.mark.slow

STEPS, EVERY = 10, 2


@pytest.mark.parametrize("engine", [("--zero", "2"), ("--zero", "3", "--compile", "--fused-stand-in")],
                         ids=["zero2", "zero3-fast-path"])
def test_sigkill_two_ranks_then_restart_matches_uninterrupted(engine: tuple[str, ...], tmp_path: Path) -> None:
    """zero3-fast-path: compiled leaf blocks and the fused loss's external head weight (CPU stand-in)
    saved and resumed too."""
    out, reference = tmp_path / "killed", tmp_path / "single"
    args = [*engine, "--steps", str(STEPS), "--save-every", str(EVERY)]
    kill_at = random.Random(2).randint(3, 7)
    mp.kill_at_step(mp.torchrun_cmd(out, *args, "--step-sleep", "0.4"), out, kill_at)
    latest = (out / "checkpoints" / "latest").read_text().strip()
    resumed_from = int(latest.removeprefix("step_"))
    assert resumed_from % EVERY == 0 and 2 <= resumed_from <= kill_at

    mp.two_ranks(out, *args)  # the same command again: resumes by itself
    assert json.loads((out / "result.json").read_text())["resumed_from"] == resumed_from
    assert mp.step_sequence(out) == list(range(1, STEPS + 1))  # rows after the checkpoint replaced
    state = json.loads((out / "checkpoints" / f"step_{STEPS:08d}" / "trainer_state.json").read_text())
    assert state["step"] == STEPS and state["stream"]["position"] == STEPS * 8  # no batch read twice
    mp.single(reference, *args)
    mp.assert_losses_close(mp.losses(out), mp.losses(reference))
    assert mp.max_weight_diff(mp.weights(out), mp.weights(reference)) <= mp.WEIGHT_ATOL
