"""SIGKILL at random moments of a run that checkpoints every step: `latest` always names a complete
checkpoint, and running the same command again resumes from it and finishes.

Every engine: the torch engine (one safetensors file + optimizer.pt), DeepSpeed ZeRO-2 (its
own folder of model and optimizer shards, written by DeepSpeed) and FSDP2 (a
torch.distributed.checkpoint folder: shards + metadata). The model is widened (`--hidden 256`: ~15 MB of weights and AdamW state per checkpoint) so a
write takes a while, and each kill is aimed at one: a random time after the first checkpoint,
then a random 0-50 ms after the next write began (its `.tmp` folder appeared). The test counts
the kills that left a `.tmp` folder behind, i.e. landed mid-write, and requires at least one.
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

STEPS = 40
ENGINES = {  # engine -> (worker arguments, trials); DeepSpeed starts slower, so fewer trials
    "torch": (("--engine", "torch"), 3),
    "deepspeed": (("--engine", "deepspeed", "--zero", "2"), 2),
    "fsdp": (("--engine", "fsdp"), 2),  # torch.distributed.checkpoint's folder of shards + metadata
}
COMMON = ("--steps", str(STEPS), "--save-every", "1", "--hidden", "256")


def _kill_after(out: Path, args: tuple[str, ...], delay: float, in_write: float) -> bool:
    """Start the worker, wait for its first checkpoint, `delay` s more, then for the next
    checkpoint write to begin (a `.tmp` folder) and `in_write` s into it; SIGKILL. True: killed
    while running (False: it finished first)."""
    cmd = [sys.executable, str(mp.WORKER), str(out), *args]
    with open(out.with_suffix(".log"), "a") as f:
        proc = subprocess.Popen(cmd, env=mp.env(), stdout=f, stderr=subprocess.STDOUT)
    root, deadline = out / "checkpoints", time.time() + 120
    while not (root / "latest").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(delay)
    while not any(root.glob("step_*.tmp")) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.001)
    time.sleep(in_write)
    running = proc.poll() is None
    if running:
        psutil.Process(proc.pid).send_signal(signal.SIGKILL)
    proc.wait()
    return running


def _assert_complete(checkpoint: Path) -> int:
    """Every file of the checkpoint is there and loads (DeepSpeed's: each .pt of its folder);
    returns its step. The rerun's resume then loads it for real."""
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    assert checkpoint.name == f"step_{state['step']:08d}"
    torch.load(checkpoint / "rng_rank0.pt", weights_only=False)
    if (checkpoint / "model.safetensors").exists():
        assert load_file(str(checkpoint / "model.safetensors"))
        torch.load(checkpoint / "optimizer.pt", weights_only=False)
    elif (checkpoint / "fsdp").is_dir():
        from torch.distributed.checkpoint import FileSystemReader

        metadata = FileSystemReader(checkpoint / "fsdp").read_metadata()
        files = {item.relative_path for item in metadata.storage_data.values()}
        assert files and all((checkpoint / "fsdp" / f).stat().st_size > 0 for f in files)
    else:
        shards = sorted((checkpoint / "deepspeed").rglob("*.pt"))
        assert len(shards) >= 2, f"{checkpoint}: model and optimizer shards expected, found {shards}"
        for shard in shards:
            torch.load(shard, weights_only=False)
    return state["step"]


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_kills_during_checkpoint_writes_never_publish_a_partial_one(engine: str, tmp_path: Path) -> None:
    args, trials = ENGINES[engine]
    args = (*args, *COMMON)
    rng = random.Random(11)
    mid_write, trial = 0, 0
    # The planned trials, then (at most 4) more until a kill has landed mid-write: how long a write
    # lasts depends on the machine's load, and a quiet machine can finish one inside the 0-50 ms.
    while trial < trials or (mid_write == 0 and trial < trials + 4):
        out = tmp_path / f"trial{trial}"
        kills = 0
        extra = trial >= trials  # aimed at the very start of the write
        trial += 1
        for _ in range(2):  # killed twice: the second run resumes, then dies writing again
            kills += _kill_after(out, args, rng.uniform(0.0, 1.0), 0.0 if extra else rng.uniform(0.0, 0.05))
            root = out / "checkpoints"
            mid_write += any(root.glob("step_*.tmp"))
            named = root / (root / "latest").read_text().strip()
            last_step = _assert_complete(named)
        assert kills, "the run finished before it could be killed: raise STEPS"
        mp.single(out, *args)  # the same command: resumes from `latest` and completes
        result = json.loads((out / "result.json").read_text())
        assert result["resumed_from"] == last_step and result["steps"] == STEPS
        assert _assert_complete(out / "checkpoints" / f"step_{STEPS:08d}") == STEPS
        assert not list((out / "checkpoints").glob("step_*.tmp"))
    print(f"{engine}: {mid_write} of {2 * trial} kills landed in a checkpoint write")
    assert mid_write >= 1, "no kill landed in a checkpoint write: the test did not test anything"
