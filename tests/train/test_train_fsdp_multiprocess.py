"""The FSDP2 engine (`engine.kind: fsdp`) on CPU: torchrun, gloo, through the real loop.

The same checks as the DeepSpeed engine's (tests/train/test_train_multiprocess_*.py), against one
uninterrupted plain process of the torch engine (the same AdamW steps on whole tensors), within
the multi-rank tolerances of tests/helpers/multiproc.py:
- 2 ranks, and two one-rank "nodes" on 127.0.0.1, train like one process;
- stage 1 (body frozen) leaves every frozen tensor bit-identical;
- a 2-rank run SIGKILLed mid-run and started again resumes from its DCP checkpoint and ends
  where the uninterrupted run ends;
- a checkpoint written by 2 ranks resumes in 1 process and the other way round (DCP reshards);
- bf16 mixed precision + activation checkpointing + CPU offload run together on 2 ranks, keep
  fp32 master weights, and stay close to the fp32 losses.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from helpers import fit_worker
from helpers import multiproc as mp
from safetensors.torch import load_file

from langadapt.train.checkpoint import checkpoint_model

pytestmark = pytest.mark.slow

STEPS, HALF, EVERY = 8, 4, 2
FSDP = ("--engine", "fsdp")


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One uninterrupted plain process, torch engine, stage 2."""
    out = tmp_path_factory.mktemp("reference") / "run"
    fit_worker.train(out, engine="torch", steps=STEPS)
    return out


def assert_matches(out: Path, reference: Path) -> None:
    mp.assert_losses_close(mp.losses(out), mp.losses(reference))
    assert mp.max_weight_diff(mp.weights(out), mp.weights(reference)) <= mp.WEIGHT_ATOL


def test_two_ranks_match_one_process(reference: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    mp.two_ranks(out, *FSDP, "--steps", str(STEPS))
    assert [(i["rank"], i["world_size"]) for i in mp.dist_infos(out)] == [(0, 2), (1, 2)]
    assert_matches(out, reference)
    checkpoint = out / "checkpoints" / f"step_{STEPS:08d}" / "fsdp"
    assert sorted(p.name for p in checkpoint.iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    exported = json.loads((out / "model" / "config.json").read_text())
    assert exported["architectures"] == ["LlamaForCausalLM"]  # the model's class, not FSDP's
    # The last checkpoint's shards, consolidated in this process, are the exported weights.
    folder = checkpoint_model(out / "checkpoints", out / "model", tmp_path / "from_checkpoint")
    assert mp.max_weight_diff(load_file(str(folder / "model.safetensors")), mp.weights(out)) == 0


def test_two_nodes_of_one_rank_match_one_process(reference: Path, tmp_path: Path) -> None:
    out = tmp_path / "nodes"
    mp.two_nodes(out, *FSDP, "--steps", str(STEPS))
    infos = mp.dist_infos(out)
    assert [(i["rank"], i["node_rank"], i["local_rank"]) for i in infos] == [(0, 0, 0), (1, 1, 0)]
    assert_matches(out, reference)


def test_stage1_two_ranks_leaves_frozen_tensors_bit_identical(tmp_path: Path) -> None:
    out = tmp_path / "stage1"
    mp.two_ranks(out, *FSDP, "--stage", "stage1", "--steps", "6")
    before, after = torch.load(out / "initial.pt"), mp.weights(out)
    trained = {"model.embed_tokens.weight", "lm_head.weight"}
    frozen = sorted(set(before) - trained)
    assert len(frozen) == 19  # 2 layers x 9 tensors + the final norm, sharded with the trained ones
    assert [name for name in frozen if not torch.equal(before[name], after[name])] == []
    assert all(not torch.equal(before[name], after[name]) for name in trained)


def test_sigkill_two_ranks_then_restart_matches_uninterrupted(reference: Path, tmp_path: Path) -> None:
    out = tmp_path / "killed"
    args = [*FSDP, "--steps", str(STEPS), "--save-every", str(EVERY)]
    kill_at = random.Random(3).randint(3, 6)
    mp.kill_at_step(mp.torchrun_cmd(out, *args, "--step-sleep", "0.4"), out, kill_at)
    resumed_from = int((out / "checkpoints" / "latest").read_text().strip().removeprefix("step_"))
    assert resumed_from % EVERY == 0 and 2 <= resumed_from <= kill_at

    mp.two_ranks(out, *args)  # the same command again: resumes by itself
    assert json.loads((out / "result.json").read_text())["resumed_from"] == resumed_from
    assert mp.step_sequence(out) == list(range(1, STEPS + 1))  # rows after the checkpoint replaced
    assert_matches(out, reference)


@pytest.mark.parametrize("first", ["two_ranks", "single"])
def test_resume_on_another_world_size(first: str, reference: Path, tmp_path: Path) -> None:
    """2 ranks -> 1 process (a smaller allocation after a requeue) and 1 -> 2 (a bigger one)."""
    out = tmp_path / "run"
    launch = {"two_ranks": mp.two_ranks, "single": mp.single}
    then = "single" if first == "two_ranks" else "two_ranks"
    launch[first](out, *FSDP, "--steps", str(HALF), "--save-every", str(HALF))
    launch[then](out, *FSDP, "--steps", str(STEPS), "--save-every", str(HALF))
    assert json.loads((out / "result.json").read_text())["resumed_from"] == HALF
    assert mp.dist_infos(out)[0]["world_size"] == (1 if then == "single" else 2)
    assert_matches(out, reference)


def test_bf16_activation_checkpointing_and_cpu_offload_on_two_ranks(reference: Path, tmp_path: Path) -> None:
    out = tmp_path / "bf16"
    mp.two_ranks(out, *FSDP, "--steps", str(STEPS), "--precision", "bf16", "--activation-checkpointing",
                 "--cpu-offload")
    weights = mp.weights(out)
    assert {w.dtype for w in weights.values()} == {torch.float32}  # fp32 master shards, gathered as bf16
    losses, fp32 = mp.losses(out), mp.losses(reference)
    assert losses.keys() == fp32.keys()
    # bf16 rounds activations to ~3 significant digits: close to fp32, but not equal.
    worst = max(abs(losses[s] - fp32[s]) / fp32[s] for s in losses)
    assert 0 < worst < 2e-2, worst
    assert losses[STEPS] < losses[1]
