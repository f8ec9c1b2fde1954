"""The stage entry point as the pipeline calls it: stage 1 from the embeddings model, stage 2 from
stage 1's, a standalone HF folder at the end, a disabled stage that only leaves a note."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from langadapt.errors import LangadaptError
from langadapt.recipe.train import CheckpointConfig, EngineConfig, TrainingSlice, TrainStageConfig
from langadapt.run import layout as rundir
from langadapt.run.context import StageContext
from langadapt.train.stage import run


def make_run(run_dir: Path, model: Path) -> None:
    """A run directory as the earlier stages leave it: embeddings/model, tokenizer, token shards."""
    shutil.copytree(model, run_dir / "embeddings" / "model")
    (run_dir / "embeddings" / rundir.MARKER).write_text("")
    (run_dir / "tokenizer" / "tokenizer").mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(model / name, run_dir / "tokenizer" / "tokenizer" / name)
    rng = np.random.default_rng(0)
    for source, size in (("nb_wiki", 6000), ("en_replay", 3000)):
        folder = run_dir / "tokenizer" / "tokens" / source
        folder.mkdir(parents=True)
        rng.integers(3, 8192, size=size, dtype=np.uint16).tofile(folder / "tokens.bin")
        meta = {"source": source, "dtype": "uint16", "num_tokens": size, "num_docs": 1, "eos_id": 1,
                "vocab_size": 8192, "lang": "nb", "role": "target"}
        (folder / "meta.json").write_text(json.dumps(meta))


def context(run_dir: Path, stage: str) -> StageContext:
    (run_dir / stage).mkdir(parents=True, exist_ok=True)
    return StageContext(run_dir=run_dir, stage=stage, seed=7)


def config(**overrides) -> TrainStageConfig:
    fields = dict(steps=3, micro_batch_size=2, grad_accum_steps=1, seq_len=32, log_every=1,
                  checkpoint=CheckpointConfig(every_steps=2))
    fields.update(overrides)
    return TrainStageConfig(**fields)


def test_stage1_then_stage2_chain_and_the_final_folder_loads_standalone(tmp_path: Path, tiny_en_llama: Path) -> None:
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    make_run(tmp_path, tiny_en_llama)
    mixture = {"nb_wiki": {"weight": 3.0}, "en_replay": {"weight": 1.0}}
    summary1 = run(TrainingSlice("stage1", config(), EngineConfig(), mixture), context(tmp_path, "stage1"))
    assert summary1["init_model"] == str(tmp_path / "embeddings" / "model")
    assert summary1["trainable_params"] == 2 * 8192 * 256 and summary1["steps"] == 3
    base = load_file(tiny_en_llama / "model.safetensors")
    stage1 = load_file(tmp_path / "stage1" / "model" / "model.safetensors")
    assert torch.equal(base["model.layers.0.mlp.up_proj.weight"], stage1["model.layers.0.mlp.up_proj.weight"])
    assert not torch.equal(base["lm_head.weight"], stage1["lm_head.weight"])

    (tmp_path / "stage1" / rundir.MARKER).write_text("")  # what the pipeline writes after stage 1
    summary2 = run(TrainingSlice("stage2", config(steps=2), EngineConfig(), mixture, after_stage1=True),
                   context(tmp_path, "stage2"))
    assert summary2["init_model"] == str(tmp_path / "stage1" / "model")
    assert summary2["trainable_params"] == sum(t.numel() for t in base.values())

    folder = tmp_path / "stage2" / "model"
    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    ids = tokenizer("Det er en fin dag", return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.isfinite(model(input_ids=ids).logits).all()
    assert json.loads((tmp_path / "stage2" / "summary.json").read_text())["steps"] == 2


def test_stage2_without_stage1_starts_from_the_embeddings_model_even_if_an_old_stage1_is_there(
    tmp_path: Path, tiny_en_llama: Path
) -> None:
    """stage1.enabled turned false after a run that completed it: its folder must not be used."""
    make_run(tmp_path, tiny_en_llama)
    shutil.copytree(tiny_en_llama, tmp_path / "stage1" / "model")
    (tmp_path / "stage1" / rundir.MARKER).write_text("")
    summary = run(TrainingSlice("stage2", config(steps=1, trainable=["re:layers\\.5\\."]), EngineConfig()),
                  context(tmp_path, "stage2"))
    assert summary["init_model"] == str(tmp_path / "embeddings" / "model")


def test_missing_starting_model_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(LangadaptError, match="stage1: no complete starting model at .*embeddings/model"):
        run(TrainingSlice("stage1", config(), EngineConfig()), context(tmp_path, "stage1"))


def test_after_a_zero3_stage_the_same_process_loads_whole_models(tmp_path: Path, tiny_en_llama: Path,
                                                                 monkeypatch) -> None:
    """load_model_for_zero3 keeps an HfDeepSpeedConfig alive; while it lives transformers loads every
    model partitioned. On an H100 the demo's evaluate stage, in the same process after a ZeRO-3
    stage 2, got [0]-shaped embeddings ("Padding_idx must be within num_embeddings")."""
    from transformers import AutoModelForCausalLM
    from transformers.integrations import is_deepspeed_zero3_enabled

    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    make_run(tmp_path, tiny_en_llama)
    engine = EngineConfig(kind="deepspeed", zero_stage=3)
    run(TrainingSlice("stage2", config(steps=2), engine, {"nb_wiki": {"weight": 1.0}}), context(tmp_path, "stage2"))
    assert not is_deepspeed_zero3_enabled()
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "stage2" / "model")
    assert reloaded.get_input_embeddings().weight.shape == (8192, 256)


def test_a_zero3_stage_loaded_partitioned_trains_through_the_fused_loss(tmp_path: Path, tiny_en_llama: Path,
                                                                       monkeypatch) -> None:
    """Under ZeRO-3 the stage loads the model already partitioned (every weight [0]-shaped outside
    DeepSpeed's forward): the fused loss's head check must not run the model there, and the loss
    must get the head's whole weight (liger's kernel replaced by its CPU stand-in)."""
    from helpers import liger_stand_in

    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    partitioned = {"zero_optimization": {"stage3_param_persistence_threshold": 0}}
    losses = {}
    for fused in (False, True):
        if fused:
            liger_stand_in.install(monkeypatch)
            monkeypatch.setattr(liger_stand_in, "CALLS", 0)
        run_dir = tmp_path / f"fused-{fused}"
        make_run(run_dir, tiny_en_llama)
        engine = EngineConfig(kind="deepspeed", zero_stage=3, fused_loss=fused, deepspeed_config=partitioned)
        summary = run(TrainingSlice("stage2", config(steps=2), engine, {"nb_wiki": {"weight": 1.0}}), context(run_dir, "stage2"))
        assert summary["settings"]["fused_loss"] is fused and summary["settings"]["zero_stage"] == 3
        losses[fused] = summary["final_loss"]
    assert liger_stand_in.CALLS >= 2  # one per step (and any validation pass)
    assert losses[True] == pytest.approx(losses[False], rel=1e-4)


def test_the_stage_runs_and_records_the_settings_the_resolver_gives(tmp_path: Path, tiny_en_llama: Path) -> None:
    """`langadapt plan` reports `resolve_training`'s settings; the stage must run with exactly them."""
    from langadapt.planning.training import resolve_training

    make_run(tmp_path, tiny_en_llama)
    stage, engine = config(steps=1, grad_accum_steps=2), EngineConfig()
    summary = run(TrainingSlice("stage1", stage, engine, {"nb_wiki": {"weight": 1.0}}), context(tmp_path, "stage1"))
    expected = resolve_training("stage1", stage, engine, 1, "cpu").as_dict()
    assert summary["settings"] == expected
    assert expected["global_batch"] == summary["global_batch"] == 4 and expected["trainable"] == "embeddings"
    assert expected["compile"] is False and expected["fused_loss"] is False  # auto is off on CPU
