"""Exact resume in NEW processes: SIGKILL at random steps, SIGTERM -> checkpoint + requeue code.

The worker (this file run as a script) trains a tiny Llama on the synthetic stream; the test
SIGKILLs one worker, SIGTERMs the next (which resumed from the first), finishes the run in
this process and compares the final weights with an uninterrupted run: they must be
bit-identical. It also checks that a resumed process starts
reading the data exactly where the checkpoint left off, without re-reading what was consumed.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
VOCAB, SEQ, MICRO, ACCUM = 128, 16, 2, 2


def stage_config(steps: int):
    from langadapt.recipe.train import CheckpointConfig, OptimizerConfig, ScheduleConfig, TrainStageConfig

    return TrainStageConfig(
        steps=steps, micro_batch_size=MICRO, grad_accum_steps=ACCUM, seq_len=SEQ, log_every=1,
        optimizer=OptimizerConfig(lr=5e-3, weight_decay=0.1),
        schedule=ScheduleConfig(kind="cosine", warmup_steps=min(3, steps)),  # a warm-up longer than the stage is refused
        checkpoint=CheckpointConfig(every_steps=3, keep_last=2),
    )


def train(out: Path, steps: int, kind: str, zero: int) -> dict:
    """One (possibly resumed) run; returns where the stream started and how much it served."""
    from helpers.synthetic import SyntheticStream, tiny_llama

    from langadapt.recipe.train import EngineConfig
    from langadapt.train.job import TrainingJob
    from langadapt.train.loop import fit

    class RecordingStream(SyntheticStream):
        first_position: int | None = None

        def next_batch(self, global_batch_size, rank=0, world_size=1):
            if self.first_position is None:
                self.first_position = self.position
            return super().next_batch(global_batch_size, rank, world_size)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # same reduction order in every process
    stream = RecordingStream(VOCAB, SEQ)
    try:
        fit(tiny_llama(VOCAB), stream,
            TrainingJob.resolve(stage_config(steps), EngineConfig(kind=kind, zero_stage=zero), out, seed=0))
    finally:
        record = {"first_position": stream.first_position, "served": stream.served}
        (out / f"stream_{os.getpid()}.json").write_text(json.dumps(record))
        torch.set_num_threads(threads)
    return record


def logged_step(out: Path) -> int:
    try:
        lines = (out / "metrics.jsonl").read_text().splitlines()
        return max((json.loads(line)["step"] for line in lines if line.endswith("}")), default=0)
    except (OSError, ValueError):
        return 0


def run_worker(out: Path, steps: int, kind: str, zero: int, stop_at: int | None = None,
               sig: int = signal.SIGKILL, timeout: float = 240) -> tuple[int, dict | None]:
    """Start a worker; send `sig` once it has logged step `stop_at`; returns (exit code, stream record)."""
    from helpers.job_env import inherited_env  # here: run as a script, this file finds tests/ later

    env = inherited_env()
    env["OMP_NUM_THREADS"] = "1"
    before = set(out.glob("stream_*.json")) if out.exists() else set()
    cmd = [sys.executable, __file__, str(out), str(steps), kind, str(zero)]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    while stop_at is not None and proc.poll() is None and time.monotonic() < deadline:
        if logged_step(out) >= stop_at:
            proc.send_signal(sig)
            break
        time.sleep(0.02)
    try:
        _, stderr = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    new = set(out.glob("stream_*.json")) - before
    assert proc.returncode in (0, -signal.SIGKILL, 75), stderr[-3000:]
    return proc.returncode, json.loads(new.pop().read_text()) if new else None


def final_weights(out: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(out / "model" / "model.safetensors")


def assert_bit_identical(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    different = [k for k in a if not torch.equal(a[k], b[k])]
    assert not different, f"{len(different)} tensors differ, e.g. {different[:3]}"


def latest_step(out: Path) -> int:
    root = out / "checkpoints"
    if not (root / "latest").is_file():
        return 0  # killed before the first checkpoint: the rerun starts from scratch
    return json.loads((root / (root / "latest").read_text() / "trainer_state.json").read_text())["step"]


def test_sigkill_and_sigterm_at_random_steps_then_resume_is_bit_identical(tmp_path: Path) -> None:
    from langadapt.runtime.signals import REQUEUE_EXIT_CODE

    steps, rng = 12, random.Random(5)
    reference = tmp_path / "reference"
    train(reference, steps, "torch", 0)

    out = tmp_path / "interrupted"
    code, _ = run_worker(out, steps, "torch", 0, stop_at=rng.randint(2, 4), sig=signal.SIGKILL)
    assert code == -signal.SIGKILL
    killed_at = latest_step(out)

    code, record = run_worker(out, steps, "torch", 0, stop_at=rng.randint(7, 9), sig=signal.SIGTERM)
    assert code == REQUEUE_EXIT_CODE
    stopped_at = latest_step(out)  # SIGTERM: a complete checkpoint at the step it stopped at
    assert stopped_at >= 7 and stopped_at == killed_at + record["served"] // (MICRO * ACCUM)
    assert record["first_position"] == killed_at * MICRO * ACCUM  # resumed exactly, nothing re-read
    assert (out / "checkpoints" / f"step_{stopped_at:08d}" / "model.safetensors").is_file()

    record = train(out, steps, "torch", 0)  # a third process: this one
    assert record == {"first_position": stopped_at * MICRO * ACCUM, "served": (steps - stopped_at) * MICRO * ACCUM}
    assert_bit_identical(final_weights(reference), final_weights(out))
    assert [json.loads(r)["step"] for r in (out / "metrics.jsonl").read_text().splitlines()] == list(range(1, 13))


if __name__ == "__main__":
    import logging

    logging.basicConfig(level=logging.WARNING)
    sys.path[:0] = [str(REPO), str(REPO / "tests")]  # tests/: helpers.synthetic
    train(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
