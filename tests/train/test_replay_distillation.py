"""Replay distillation (`stage.replay_distillation`, langadapt.train.distill): the KL term's values,
the loss module's sum, the stream's replay rows, and training that keeps the replay rows' predictions
at the teacher's."""

from __future__ import annotations

import copy
import json
import math
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers.synthetic import tiny_llama

from langadapt.data.stream import build_stream
from langadapt.errors import LangadaptError
from langadapt.recipe import load_recipe
from langadapt.recipe.train import EngineConfig, OptimizerConfig, ScheduleConfig, TrainStageConfig
from langadapt.run.layout import RunLayout
from langadapt.train.distill import ReplayDistillation, token_kl
from langadapt.train.fastpath import CausalLMLoss
from langadapt.train.job import TrainingJob
from langadapt.train.loop import fit
from langadapt.train.stage import load_distillation

VOCAB, SEQ = 64, 16


def test_token_kl_is_the_kl_to_the_teacher_renormalised_on_the_kept_ids() -> None:
    teacher = torch.tensor([[0.0, 0.0, 5.0, 5.0]])  # kept: ids 0 and 1, equally likely; 2 and 3 dropped
    kept = torch.tensor([True, True, False, False])
    uniform = torch.zeros(1, 4)  # the student spreads over all four ids: log 2 nats lost
    assert float(token_kl(uniform, teacher, kept)) == pytest.approx(math.log(2), rel=1e-6)
    on_kept = torch.tensor([[1.0, 1.0, -1e4, -1e4]])  # the teacher's restricted distribution exactly
    assert float(token_kl(on_kept, teacher, kept)) == pytest.approx(0.0, abs=1e-6)
    torch.manual_seed(0)
    student, other = torch.randn(3, 7, 10), torch.randn(3, 7, 10)
    every = torch.ones(10, dtype=torch.bool)  # all ids kept: torch's own KL
    expected = F.kl_div(F.log_softmax(student, -1), F.log_softmax(other, -1), log_target=True, reduction="none").sum(-1)
    assert torch.allclose(token_kl(student, other, every), expected, atol=1e-6)


def test_the_loss_adds_the_weighted_kl_of_the_replay_rows_over_every_token_of_the_micro_batch() -> None:
    torch.manual_seed(0)
    model, teacher = tiny_llama(VOCAB, seed=0), tiny_llama(VOCAB, seed=1)
    kept = torch.arange(VOCAB) < 40
    ids = torch.randint(0, VOCAB, (4, SEQ + 1))
    inputs, labels, rows = ids[:, :-1], ids[:, 1:], torch.tensor([False, True, False, True])
    plain = CausalLMLoss(model, fused=False)(inputs, labels)
    distilled = CausalLMLoss(model, False, ReplayDistillation(teacher, kept, weight=2.0))
    with torch.no_grad():
        kl = token_kl(model(input_ids=inputs[rows]).logits, teacher(input_ids=inputs[rows]).logits, kept)
        assert float(distilled(inputs, labels, None, rows)) == pytest.approx(float(plain) + 2.0 * float(kl.sum()) / (4 * SEQ),
                                                                             rel=1e-5)
        assert float(distilled(inputs, labels, None, torch.zeros(4, dtype=torch.bool))) == pytest.approx(float(plain))
        # With document masking the teacher sees the distilled rows' positions too (two documents a row).
        positions = torch.cat([torch.arange(SEQ // 2), torch.arange(SEQ // 2)]).repeat(4, 1)
        packed = {"input_ids": inputs[rows], "position_ids": positions[rows], "use_cache": False}  # as model_inputs
        kl = token_kl(model(**packed).logits, teacher(**packed).logits, kept)
        masked = CausalLMLoss(model, fused=False)(inputs, labels, positions)
        assert float(distilled(inputs, labels, positions, rows)) == pytest.approx(
            float(masked) + 2.0 * float(kl.sum()) / (4 * SEQ), rel=1e-5)
        # The starting model as its own teacher over every id: nothing to add.
        same = CausalLMLoss(model, False, ReplayDistillation(copy.deepcopy(model), torch.ones(VOCAB, dtype=torch.bool), 2.0))
        assert float(same(inputs, labels, None, rows)) == pytest.approx(float(plain), rel=1e-6)
    # The teacher is no parameter of the module the engines wrap, shard and save.
    assert {n for n, _ in distilled.named_parameters()} == {n for n, _ in CausalLMLoss(model, False).named_parameters()}


def write_shard(folder: Path, tokens: np.ndarray, role: str) -> None:
    """A token shard as langadapt.data.shards writes one (tokens.bin + meta.json)."""
    folder.mkdir(parents=True)
    tokens.astype(np.uint16).tofile(folder / "tokens.bin")
    meta = {"source": folder.name, "lang": folder.name[:2], "role": role, "dtype": "uint16",
            "num_tokens": int(tokens.size), "num_docs": 1, "eos_id": 0, "vocab_size": VOCAB}
    (folder / "meta.json").write_text(json.dumps(meta))


def two_sources(tokens_dir: Path) -> None:
    """A target source counting up by 1 from 1..31 and a replay source counting up by 3 from 33..63:
    a row's values say where it came from."""
    write_shard(tokens_dir / "nb.target", (np.arange(4000) % 31) + 1, "target")
    write_shard(tokens_dir / "en.replay", (np.arange(0, 12000, 3) % 31) + 33, "replay")


def test_the_stream_says_which_rows_of_the_last_batch_came_from_a_replay_source(tmp_path: Path) -> None:
    two_sources(tmp_path)
    stream = build_stream(tmp_path, {"nb.target": {"weight": 0.7}, "en.replay": {"weight": 0.3}}, SEQ, 64, seed=0)
    replayed = 0
    for _ in range(4):
        batch = stream.next_batch(16, rank=1, world_size=2)  # this rank's 8 rows
        replay = stream.rows_of_role("replay")
        assert replay.shape == (8,) and np.array_equal(replay, batch[:, 0] > 32)
        assert np.array_equal(stream.rows_of_role("target"), ~replay)
        replayed += int(replay.sum())
    assert 8 <= replayed <= 11  # 30% of these 32 rows, within the interleaving's one sample per source


def replay_kl(model: torch.nn.Module, teacher: torch.nn.Module, tokens: torch.Tensor) -> float:
    with torch.no_grad():
        return float(token_kl(model(input_ids=tokens).logits, teacher(input_ids=tokens).logits,
                              torch.ones(VOCAB, dtype=torch.bool)).mean())


@pytest.mark.parametrize("engine", [EngineConfig(), EngineConfig(kind="deepspeed", zero_stage=3)], ids=["torch", "zero3"])
def test_distilled_training_keeps_the_replay_rows_near_the_teacher_and_still_learns_the_target(
        tmp_path: Path, engine: EngineConfig) -> None:
    """The same run with and without the term: with it, the model's predictions on replay text stay
    nearer the starting model's, while the target's loss still falls (DeepSpeed passes the rows
    through its engine's forward to the same loss module; under ZeRO-3 the teacher stays whole)."""
    two_sources(tmp_path / "tokens")
    replay_rows = torch.from_numpy(((np.arange(0, 3 * 8 * (SEQ + 1), 3) % 31) + 33).reshape(8, SEQ + 1)[:, :-1].astype(np.int64))
    config = TrainStageConfig(steps=30, micro_batch_size=4, grad_accum_steps=2, seq_len=SEQ, log_every=30,
                              optimizer=OptimizerConfig(lr=1e-2), schedule=ScheduleConfig(kind="constant", warmup_steps=1))
    results, kls = {}, {}
    for weight in (0.0, 5.0):
        model = tiny_llama(VOCAB, seed=0)
        teacher = copy.deepcopy(model).eval().requires_grad_(False)
        stream = build_stream(tmp_path / "tokens", {"nb.target": {"weight": 0.7}, "en.replay": {"weight": 0.3}}, SEQ,
                              30 * 8, seed=0)
        job = TrainingJob.resolve(config, engine, tmp_path / f"out{weight}", seed=0, stage_name="stage2")
        if weight:
            job = replace(job, distillation=ReplayDistillation(teacher, torch.ones(VOCAB, dtype=torch.bool), weight))
        results[weight] = fit(model, stream, job)
        kls[weight] = replay_kl(model, teacher, replay_rows)
    assert kls[5.0] < 0.5 * kls[0.0], kls
    first = math.log(VOCAB)  # an untrained model's cross-entropy: both runs learned the data
    assert results[5.0].final_loss < 0.5 * first and results[0.0].final_loss < 0.5 * first


def test_a_run_without_the_embeddings_stage_rows_is_refused_at_the_key(tmp_path: Path) -> None:
    job = TrainingJob.resolve(TrainStageConfig(replay_distillation=1.0), EngineConfig(), tmp_path / "stage2", seed=0,
                              stage_name="stage2")
    ctx = SimpleNamespace(layout=RunLayout(tmp_path))
    with pytest.raises(LangadaptError, match=r"stage2\.replay_distillation: the teacher is the embeddings stage's model"):
        load_distillation(job, ctx)
    assert load_distillation(replace(job, config=TrainStageConfig()), ctx) is None  # 0: off, nothing loaded


def test_a_recipe_that_would_distil_nothing_is_refused_with_the_key() -> None:
    demo = Path(__file__).resolve().parents[2] / "recipes" / "tiny_norwegian_warm.yaml"
    assert load_recipe(demo, ["stage2.replay_distillation=2"]).recipe.stage2.replay_distillation == 2
    with pytest.raises(LangadaptError, match=r"stage2\.replay_distillation: the stage's mixture has no replay rows"):
        load_recipe(demo, ["stage2.replay_distillation=2", "stage2.replay=0"])
    with pytest.raises(LangadaptError, match=r"stage2\.replay_distillation: init: scratch has no base model"):
        load_recipe(demo, ["stage2.replay_distillation=2", "init=scratch"])
    # Unset, it stays out of the dump that the stage fingerprints hash: finished runs keep their prints.
    assert "replay_distillation" not in load_recipe(demo).recipe.stage2.model_dump()
