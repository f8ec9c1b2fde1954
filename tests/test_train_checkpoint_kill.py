"""SIGKILL at random moments of a run that checkpoints every step: `latest` always names a complete
checkpoint, and running the same command again resumes from it and finishes.

The model is widened (`--hidden 256`: ~15 MB of weights and AdamW state per checkpoint) so most
of the wall time after start-up is spent writing checkpoints, and the kills land in the writes
(the test counts the trials that left a `.tmp` folder behind, i.e. were killed mid-write).
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
from helpers import multiproc as mp
from safetensors.torch import load_file

pytestmark = pytest.mark.slow

STEPS, TRIALS = 40, 3
ARGS = ("--engine", "torch", "--steps", str(STEPS), "--save-every", "1", "--hidden", "256")


def _kill_after(out: Path, delay: float) -> bool:
    """Start the worker, wait for its first checkpoint, then `delay` s more; SIGKILL. True: killed
    while running (False: it finished first)."""
    cmd = [sys.executable, str(mp.WORKER), str(out), *ARGS]
    with open(out.with_suffix(".log"), "a") as f:
        proc = subprocess.Popen(cmd, env=mp.env(), stdout=f, stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    while not (out / "checkpoints" / "latest").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(delay)
    running = proc.poll() is None
    if running:
        psutil.Process(proc.pid).send_signal(signal.SIGKILL)
    proc.wait()
    return running


def _assert_complete(checkpoint: Path) -> int:
    """Every file of a torch-engine checkpoint is there and loads; returns its step."""
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    assert checkpoint.name == f"step_{state['step']:08d}"
    assert load_file(str(checkpoint / "model.safetensors"))
    torch.load(checkpoint / "optimizer.pt", weights_only=False)
    torch.load(checkpoint / "rng_rank0.pt", weights_only=False)
    return state["step"]


def test_kills_during_checkpoint_writes_never_publish_a_partial_one(tmp_path: Path) -> None:
    rng = random.Random(11)
    mid_write = 0
    for trial in range(TRIALS):
        out = tmp_path / f"trial{trial}"
        kills = 0
        for _ in range(2):  # killed twice: the second run resumes, then dies writing again
            kills += _kill_after(out, rng.uniform(0.0, 1.5))
            root = out / "checkpoints"
            mid_write += any(root.glob("step_*.tmp"))
            named = root / (root / "latest").read_text().strip()
            last_step = _assert_complete(named)
        assert kills, "the run finished before it could be killed: raise STEPS"
        mp.single(out, *ARGS)  # the same command: resumes from `latest` and completes
        result = json.loads((out / "result.json").read_text())
        assert result["resumed_from"] == last_step and result["steps"] == STEPS
        assert _assert_complete(out / "checkpoints" / f"step_{STEPS:08d}") == STEPS
        assert not list((out / "checkpoints").glob("step_*.tmp"))
    print(f"{mid_write} of {2 * TRIALS} kills landed in a checkpoint write")
    assert mid_write >= 1, "no kill landed in a checkpoint write: the test did not test anything"
