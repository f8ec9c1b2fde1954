"""Resume with a different world size: a checkpoint written by 2 ranks, resumed by 1 process
(and the other way round for ZeRO-3).

- torch engine (DDP): the checkpoint holds the full model and optimizer state, and the data
  position is global, so a 1-process run simply continues.
- DeepSpeed ZeRO-1/2/3: the optimizer state is sharded per rank and DeepSpeed refuses another
  world size as it stands; the engine notices (2 shards, 1 rank), converts the checkpoint with
  DeepSpeed's `ds_to_universal` once and loads the universal copy: it continues as well. (ZeRO-3
  caught two bugs in DeepSpeed's universal loader that langadapt works around: every group got
  the first group's weight decay, and all groups shared one in-place-incremented `step`.)
Both must end within the multi-rank tolerances of an uninterrupted single-process run (the
reference runs in this process, torch engine: it computes the same AdamW steps).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import fit_worker
from helpers import multiproc as mp

pytestmark = pytest.mark.slow

HALF, STEPS = 4, 8


@pytest.fixture(scope="module")
def references(tmp_path_factory: pytest.TempPathFactory):
    """Uninterrupted single-process runs (torch engine), one per stage, built on first use."""
    built: dict[str, Path] = {}

    def get(stage: str) -> Path:
        if stage not in built:
            built[stage] = tmp_path_factory.mktemp(f"reference_{stage}") / "run"
            fit_worker.train(built[stage], engine="torch", stage=stage, steps=STEPS)
        return built[stage]

    return get


@pytest.mark.parametrize(("engine", "zero", "stage"), [
    ("torch", 2, "stage2"), ("deepspeed", 1, "stage2"), ("deepspeed", 2, "stage2"), ("deepspeed", 3, "stage2"),
    ("deepspeed", 3, "stage1"),  # frozen body: only the embeddings' optimizer state is sharded
])
def test_two_ranks_then_one_process(engine: str, zero: int, stage: str, references, tmp_path: Path) -> None:
    out, reference = tmp_path / "run", references(stage)
    common = ("--engine", engine, "--zero", str(zero), "--stage", stage)
    mp.two_ranks(out, *common, "--steps", str(HALF))
    mp.single(out, *common, "--steps", str(STEPS))
    assert json.loads((out / "result.json").read_text())["resumed_from"] == HALF
    assert mp.dist_infos(out)[0]["world_size"] == 1  # rewritten by the 1-process run
    mp.assert_losses_close(mp.losses(out), mp.losses(reference))
    assert mp.max_weight_diff(mp.weights(out), mp.weights(reference)) <= mp.WEIGHT_ATOL
    half = out / "checkpoints" / f"step_{HALF:08d}"
    if engine == "deepspeed":  # converted once, beside the original shards (keep_last=2 keeps it)
        assert (half / "universal" / "zero").is_dir() and (half / "deepspeed").is_dir()
        assert (half / "latest_universal").read_text() == "universal"


def test_one_process_then_two_ranks_zero3(references, tmp_path: Path) -> None:
    """Growing the job (more nodes after a requeue): one ZeRO-3 shard resumed by two ranks."""
    out, reference = tmp_path / "run", references("stage2")
    mp.single(out, "--engine", "deepspeed", "--zero", "3", "--steps", str(HALF))
    mp.two_ranks(out, "--engine", "deepspeed", "--zero", "3", "--steps", str(STEPS))
    assert json.loads((out / "result.json").read_text())["resumed_from"] == HALF
    assert mp.dist_infos(out)[1]["world_size"] == 2
    mp.assert_losses_close(mp.losses(out), mp.losses(reference))
    assert mp.max_weight_diff(mp.weights(out), mp.weights(reference)) <= mp.WEIGHT_ATOL
    assert (out / "checkpoints" / f"step_{HALF:08d}" / "universal" / "zero").is_dir()
