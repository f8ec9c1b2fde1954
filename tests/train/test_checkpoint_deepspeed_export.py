"""`checkpoint_model` on DeepSpeed checkpoints (what `langadapt export --checkpoint stage2/500` reads):
the ZeRO partitions are joined in this process on CPU and give the weights the engine exported at
the same step, bit for bit in fp32, frozen parameters included (ZeRO-1 saves none of their
fragments: they come from the module state), named as in the Hugging Face model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import multiproc as mp
from safetensors.torch import load_file

from langadapt.errors import LangadaptError
from langadapt.train.checkpoint import checkpoint_model

TRAINED_IN_STAGE1 = {"model.embed_tokens.weight", "lm_head.weight"}


def assert_bit_equal(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert got.keys() == want.keys()
    assert all(got[k].dtype == torch.float32 for k in got)
    differ = [k for k in want if not torch.equal(got[k], want[k])]
    assert not differ, differ


@pytest.mark.parametrize(("zero", "stage"), [(0, "stage2"), (1, "stage1"), (2, "stage2"), (2, "stage1")])
def test_a_deepspeed_checkpoint_exports_the_engines_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            zero: int, stage: str) -> None:
    from helpers.synthetic import SyntheticStream, tiny_llama
    from test_train_resume import SEQ, VOCAB, stage_config

    from langadapt.recipe.train import EngineConfig
    from langadapt.train.job import TrainingJob
    from langadapt.train.loop import fit

    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    model = tiny_llama(VOCAB)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    fit(model, SyntheticStream(VOCAB, SEQ),
        TrainingJob.resolve(stage_config(4), EngineConfig(kind="deepspeed", zero_stage=zero), tmp_path / "run", seed=0,
                            stage_name=stage))
    checkpoints = tmp_path / "run" / "checkpoints"
    assert (checkpoints / "step_00000004" / "deepspeed").is_dir()

    folder = checkpoint_model(checkpoints, tmp_path / "run" / "model", tmp_path / "exported")
    weights, final = load_file(folder / "model.safetensors"), load_file(tmp_path / "run" / "model" / "model.safetensors")
    assert_bit_equal(weights, final)
    assert (folder / "config.json").is_file()
    if stage == "stage1":  # frozen body: present, and still the initial weights
        assert {k for k in initial if not torch.equal(initial[k], weights[k])} == TRAINED_IN_STAGE1

    # An earlier checkpoint is an earlier point of training, not the final weights again.
    step3 = load_file(checkpoint_model(checkpoints / "step_00000003", tmp_path / "run" / "model",
                                       tmp_path / "step3") / "model.safetensors")
    assert not torch.equal(step3["lm_head.weight"], final["lm_head.weight"])


@pytest.mark.slow
def test_a_two_rank_zero3_checkpoint_exports_the_engines_weights(tmp_path: Path) -> None:
    """Two torchrun ranks, each holding half of every parameter and of the fp32 master weights."""
    out = tmp_path / "run"
    mp.two_ranks(out, "--zero", "3", "--steps", "4")
    shards = sorted(p.name for p in (out / "checkpoints" / "step_00000004" / "deepspeed").glob("*optim_states.pt"))
    assert len(shards) == 2, shards
    folder = checkpoint_model(out / "checkpoints", out / "model", tmp_path / "exported")
    assert_bit_equal(load_file(folder / "model.safetensors"), mp.weights(out))


def test_a_checkpoint_with_no_weights_is_one_clear_error(tmp_path: Path) -> None:
    step = tmp_path / "checkpoints" / "step_00000002"
    (step / "deepspeed").mkdir(parents=True)
    (step / "trainer_state.json").write_text("{}")
    with pytest.raises(LangadaptError, match="no DeepSpeed model or ZeRO optimizer states") as empty:
        checkpoint_model(step, tmp_path, tmp_path / "out")
    assert "\n" not in str(empty.value)
    (step / "deepspeed").rmdir()
    with pytest.raises(LangadaptError, match="not a langadapt checkpoint"):
        checkpoint_model(step, tmp_path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_zero_shards_are_counted_with_and_without_the_bf16_prefix(tmp_path: Path) -> None:
    """bf16 runs (the GPU default) write `bf16_zero_pp_rank_*` shards: a count of 0 would skip the
    world-size check on resume and read a ZeRO checkpoint as a ZeRO-0 one on export."""
    from langadapt.train.engines.deepspeed_engine import zero_shard_count

    for rank in range(2):
        (tmp_path / f"bf16_zero_pp_rank_{rank}_mp_rank_00_optim_states.pt").touch()
    (tmp_path / "zero_pp_rank_0_mp_rank_00_model_states.pt").touch()  # weights, not a shard
    assert zero_shard_count(tmp_path) == 2
    plain = tmp_path / "fp32"
    plain.mkdir()
    (plain / "zero_pp_rank_0_mp_rank_00_optim_states.pt").touch()
    assert zero_shard_count(plain) == 1
