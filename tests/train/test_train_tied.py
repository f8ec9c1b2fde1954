"""Tied input/output embeddings (Llama-3.2-1B, Gemma, Qwen2 small) through training: the matrix
is one parameter, so a checkpoint and a stage's model folder hold it once; a resumed run and the
exported model are what an uninterrupted run gives, bit for bit."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers.synthetic import SyntheticStream, tiny_llama
from safetensors import safe_open

from langadapt.recipe.train import (
    CheckpointConfig,
    EngineConfig,
    OptimizerConfig,
    ScheduleConfig,
    TrainStageConfig,
)
from langadapt.train.job import TrainingJob
from langadapt.train.loop import fit

VOCAB, SEQ, HIDDEN = 128, 16, 32
ENGINES = {"torch": EngineConfig(), "fsdp": EngineConfig(kind="fsdp"),
           "deepspeed": EngineConfig(kind="deepspeed", zero_stage=2)}


def stage(steps: int) -> TrainStageConfig:
    return TrainStageConfig(steps=steps, micro_batch_size=2, grad_accum_steps=2, seq_len=SEQ, log_every=1,
                            optimizer=OptimizerConfig(lr=1e-2, weight_decay=0.1),
                            schedule=ScheduleConfig(kind="cosine", warmup_steps=1),
                            checkpoint=CheckpointConfig(every_steps=2, keep_last=2))


def train(out: Path, engine: str) -> list[float]:
    torch.manual_seed(0)
    model = tiny_llama(VOCAB, tie_word_embeddings=True)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the same reduction order in both runs
    try:
        fit(model, SyntheticStream(VOCAB, SEQ),
            TrainingJob.resolve(stage(4), ENGINES[engine], out, seed=0, stage_name="stage2"))
    finally:
        torch.set_num_threads(threads)
    return [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]


def embedding_matrices(shapes: list[tuple[int, ...]]) -> int:
    return sum(1 for shape in shapes if tuple(shape) == (VOCAB, HIDDEN))


def stored_shapes(step: Path) -> list[tuple[int, ...]]:
    """Shapes of the model weights a checkpoint step holds, whatever the engine wrote."""
    if (step / "fsdp").is_dir():
        from torch.distributed.checkpoint import FileSystemReader

        metadata = FileSystemReader(step / "fsdp").read_metadata().state_dict_metadata
        return [tuple(m.size) for k, m in metadata.items() if k.startswith("model.") and hasattr(m, "size")]
    if (step / "deepspeed").is_dir():  # torch.save keeps one storage for the two names
        state = torch.load(step / "deepspeed" / "mp_rank_00_model_states.pt", weights_only=False)["module"]
        return [tuple(t.shape) for t in {t.untyped_storage().data_ptr(): t for t in state.values()}.values()]
    with safe_open(step / "model.safetensors", "pt") as f:
        return [tuple(f.get_slice(k).get_shape()) for k in f.keys()]


@pytest.fixture()
def own_process_group(monkeypatch: pytest.MonkeyPatch):
    """DeepSpeed and FSDP start a one-rank process group in this process: it is ended with the test,
    so the next engine (DeepSpeed wants LOCAL_RANK when it finds a group it did not start) begins clean."""
    import torch.distributed as torch_dist

    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    started_here = not torch_dist.is_initialized()
    yield
    if started_here and torch_dist.is_initialized():
        torch_dist.destroy_process_group()


@pytest.mark.parametrize("engine", list(ENGINES))
def test_a_tied_matrix_is_stored_once_and_resume_is_bit_identical(engine: str, tmp_path: Path,
                                                                  own_process_group: None) -> None:
    from transformers import AutoModelForCausalLM

    whole = train(tmp_path / "whole", engine)
    checkpoints = tmp_path / "whole" / "checkpoints"
    assert embedding_matrices(stored_shapes(checkpoints / "step_00000002")) == 1
    with safe_open(tmp_path / "whole" / "model" / "model.safetensors", "pt") as f:
        assert embedding_matrices([tuple(f.get_slice(k).get_shape()) for k in f.keys()]) == 1

    # Interrupted after step 2: only that checkpoint survives; the rerun resumes from it.
    resumed_dir = tmp_path / "resumed" / "checkpoints"
    resumed_dir.mkdir(parents=True)
    shutil.copytree(checkpoints / "step_00000002", resumed_dir / "step_00000002")
    (resumed_dir / "latest").write_text("step_00000002")
    resumed = train(tmp_path / "resumed", engine)
    assert resumed == whole[2:]

    models = [AutoModelForCausalLM.from_pretrained(tmp_path / run / "model", dtype=torch.float32)
              for run in ("whole", "resumed")]
    for model in models:
        assert model.lm_head.weight is model.model.embed_tokens.weight  # still tied after the reload
    for (name, a), b in zip(models[0].state_dict().items(), models[1].state_dict().values()):
        assert torch.equal(a, b), name
