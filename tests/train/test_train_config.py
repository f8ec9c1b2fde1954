"""LR schedule values, the trainable-parameter policy, and start-up refusal of bad combinations."""

from __future__ import annotations

import pytest
import torch
from helpers.synthetic import tiny_llama

from langadapt.errors import LangadaptError
from langadapt.planning.training import check_engine
from langadapt.recipe.train import (
    EMBEDDING_PATTERNS,
    EngineConfig,
    OptimizerConfig,
    ScheduleConfig,
    TrainStageConfig,
)
from langadapt.train.engines.base import build_optimizer
from langadapt.train.engines.deepspeed_json import deepspeed_config
from langadapt.train.flops import flops_per_token
from langadapt.train.lr import lr_at
from langadapt.train.policy import param_groups, select_trainable, set_learning_rate


def test_normistral_stage1_schedule_is_constant_after_ten_warmup_steps() -> None:
    schedule = ScheduleConfig(kind="constant", warmup_steps=10)
    values = [lr_at(s, schedule, 1e-4, 1000) for s in range(1000)]
    assert values[0] == pytest.approx(1e-5)
    assert values[4] == pytest.approx(5e-5)
    assert values[9] == pytest.approx(1e-4)
    assert all(v == pytest.approx(1e-4) for v in values[9:])


def test_cosine_warms_up_then_halves_at_midpoint_and_ends_near_min() -> None:
    schedule = ScheduleConfig(kind="cosine", warmup_steps=100, min_lr_ratio=0.1)
    assert lr_at(99, schedule, 1e-4, 1100) == pytest.approx(1e-4)
    assert lr_at(100, schedule, 1e-4, 1100) == pytest.approx(1e-4)
    assert lr_at(600, schedule, 1e-4, 1100) == pytest.approx(0.55e-4)  # (peak + min) / 2
    assert lr_at(1099, schedule, 1e-4, 1100) == pytest.approx(1e-5, rel=1e-4)
    values = [lr_at(s, schedule, 1e-4, 1100) for s in range(100, 1100)]
    assert all(a >= b for a, b in zip(values, values[1:]))


def test_wsd_is_flat_until_the_decay_fraction_then_linear() -> None:
    schedule = ScheduleConfig(kind="wsd", warmup_steps=10, min_lr_ratio=0.0, decay_fraction=0.2)
    assert lr_at(10, schedule, 2.0, 100) == 2.0
    assert lr_at(79, schedule, 2.0, 100) == 2.0
    assert lr_at(80, schedule, 2.0, 100) == 2.0
    assert lr_at(90, schedule, 2.0, 100) == pytest.approx(1.0)
    assert lr_at(99, schedule, 2.0, 100) == pytest.approx(0.1)


def test_linear_decay_and_stage2_rewarm_starts_small_again() -> None:
    schedule = ScheduleConfig(kind="linear", warmup_steps=4, min_lr_ratio=0.5)
    assert [lr_at(s, schedule, 1.0, 14) for s in (0, 3, 4, 9)] == pytest.approx([0.25, 1.0, 1.0, 0.75])
    no_warmup = ScheduleConfig(kind="cosine", warmup_steps=0, min_lr_ratio=0.0)
    assert lr_at(0, no_warmup, 1.0, 10) == 1.0
    assert lr_at(5, no_warmup, 1.0, 10) == pytest.approx(0.5)


def test_stage_default_patterns_pick_embeddings_and_head_only() -> None:
    model = tiny_llama()
    stage = TrainStageConfig()
    assert stage.trainable_patterns("stage1") == EMBEDDING_PATTERNS
    assert stage.trainable_patterns("stage2") == ["all"]
    selection = select_trainable(model, stage.trainable_patterns("stage1"))
    assert [n for n, _ in selection.named] == ["model.embed_tokens.weight", "lm_head.weight"]
    assert all(not p.requires_grad for n, p in model.named_parameters() if n in selection.frozen)
    assert len(selection.frozen) == len(list(model.parameters())) - 2


def test_regex_patterns_and_a_pattern_matching_nothing_is_an_error() -> None:
    model = tiny_llama()
    selection = select_trainable(model, [r"re:layers\.1\..*mlp"])
    assert {n for n, _ in selection.named} == {f"model.layers.1.mlp.{m}_proj.weight" for m in ("gate", "up", "down")}
    with pytest.raises(LangadaptError, match=r"stage1\.trainable: patterns \['embed_tokenz'\] match no parameter"):
        select_trainable(model, ["embed_tokenz"], "stage1.trainable")
    with pytest.raises(LangadaptError, match="invalid regular expression"):
        select_trainable(model, ["re:(unclosed"])


def test_optimizer_holds_only_trainable_params_and_norms_never_decay() -> None:
    model = tiny_llama()
    selection = select_trainable(model, ["*embed_tokens.weight", "lm_head.weight", "*norm.weight"])
    optimizer = build_optimizer(selection, OptimizerConfig(weight_decay=0.1), torch.device("cpu"))
    held = {id(p) for g in optimizer.param_groups for p in g["params"]}
    assert held == {id(p) for p in selection.params}
    assert not held & {id(p) for n, p in model.named_parameters() if n in selection.frozen}
    decay, no_decay = optimizer.param_groups
    assert decay["weight_decay"] == 0.1 and {p.ndim for p in decay["params"]} == {2}
    assert no_decay["weight_decay"] == 0.0 and {p.ndim for p in no_decay["params"]} == {1}
    groups = param_groups(selection, OptimizerConfig(decay_embeddings=False))
    assert len(groups) == 1 and groups[0]["weight_decay"] == 0.0


def test_body_lr_scale_moves_the_body_at_its_fraction_of_the_scheduled_lr() -> None:
    """Adam's first step moves every weight by about its group's LR (the update is lr * g/|g|), so after
    one step at 1e-2 the embedding and head rows move ~1e-2 and the body ~2.5e-3; the groups keep
    their scale when the schedule sets a new LR."""
    torch.manual_seed(0)
    model = tiny_llama()
    selection = select_trainable(model, ["all"])
    optimizer = build_optimizer(selection, OptimizerConfig(lr=1.0, weight_decay=0.0, body_lr_scale=0.25), torch.device("cpu"))
    assert sorted(g["lr_scale"] for g in optimizer.param_groups) == [0.25, 0.25, 1.0]  # body matrices, norms, rows
    set_learning_rate(optimizer, 1e-2)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    ids = torch.randint(0, model.config.vocab_size, (2, 16))
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    moved = {n: float((p.detach() - before[n]).abs().max()) for n, p in model.named_parameters()}
    assert moved["model.embed_tokens.weight"] == pytest.approx(1e-2, rel=0.02)
    assert moved["lm_head.weight"] == pytest.approx(1e-2, rel=0.02)
    assert moved["model.layers.0.mlp.up_proj.weight"] == pytest.approx(2.5e-3, rel=0.02)
    assert moved["model.norm.weight"] == pytest.approx(2.5e-3, rel=0.02)
    # At 1.0 (the default) there is one group per decay class, as before the option existed.
    assert [g["lr_scale"] for g in param_groups(selection, OptimizerConfig())] == [1.0, 1.0]


def test_frozen_body_costs_about_four_n_flops_per_token() -> None:
    model = tiny_llama(vocab_size=64, hidden=256, layers=4)  # body-dominated
    full = flops_per_token(model, select_trainable(model, ["all"]), seq_len=1)
    frozen = flops_per_token(model, select_trainable(model, EMBEDDING_PATTERNS), seq_len=1)
    n = sum(p.numel() for n_, p in model.named_parameters() if "embed_tokens" not in n_)
    assert full == pytest.approx(6 * n + 12 * 4 * 256)
    assert 0.66 < frozen / full < 0.68


@pytest.mark.parametrize(
    ("stage", "engine", "device", "message"),
    [
        (TrainStageConfig(), EngineConfig(kind="torch", zero_stage=2), "cpu",
         "engine.zero_stage: ZeRO stage 2 needs engine.kind: deepspeed"),
        (TrainStageConfig(), EngineConfig(precision="fp16"), "cpu", "engine.precision: fp16 needs a GPU"),
        (TrainStageConfig(), EngineConfig(fused_loss=True), "cpu", "engine.fused_loss: liger-kernel's Triton"),
        (TrainStageConfig(), EngineConfig(attn_implementation="flash_attention_2"), "cpu", "needs a GPU"),
    ],
)
def test_bad_combinations_are_refused_with_the_recipe_key(stage, engine, device, message) -> None:
    with pytest.raises(LangadaptError, match=message):
        check_engine("stage1", stage, engine, device)


def test_zero3_runs_as_asked_for_a_frozen_body_and_a_stage_can_override_it() -> None:
    engine = EngineConfig(kind="deepspeed", zero_stage=3, activation_checkpointing=True)
    assert check_engine("stage1", TrainStageConfig(), engine, "cuda").zero_stage == 3
    assert check_engine("stage2", TrainStageConfig(), engine, "cuda").zero_stage == 3
    assert check_engine("stage1", TrainStageConfig(zero_stage=1), engine, "cuda").zero_stage == 1


def test_zero3_frozen_recompute_needs_the_deepspeed_that_fixed_it(monkeypatch) -> None:
    """DeepSpeed 0.19.2 failed the recompute of a frozen body's checkpointed activations under ZeRO-3."""
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.19.2")
    engine = EngineConfig(kind="deepspeed", zero_stage=3, activation_checkpointing=True)
    with pytest.raises(LangadaptError, match=r"engine\.zero_stage: ZeRO-3 with a frozen body \(stage1\.trainable\) and "
                                             r"engine\.activation_checkpointing needs deepspeed>=0\.19\.8 \(installed: 0\.19\.2"):
        check_engine("stage1", TrainStageConfig(), engine, "cuda")
    assert check_engine("stage2", TrainStageConfig(), engine, "cuda").zero_stage == 3  # nothing frozen
    no_recompute = engine.model_copy(update={"activation_checkpointing": False})
    assert check_engine("stage1", TrainStageConfig(), no_recompute, "cuda").zero_stage == 3


def test_deepspeed_json_is_filled_and_conflicts_name_both_keys() -> None:
    stage = TrainStageConfig(micro_batch_size=4, grad_accum_steps=8, grad_clip=1.0)
    raw = {"zero_optimization": {"stage": 3, "overlap_comm": True}, "steps_per_print": 50}
    config = deepspeed_config(stage, "stage2", EngineConfig(kind="deepspeed", zero_stage=3,
                                                            precision="bf16", deepspeed_config=raw), 16)
    assert config["train_batch_size"] == 4 * 8 * 16
    assert config["zero_optimization"] == {"stage": 3, "overlap_comm": True,
                                           "stage3_gather_16bit_weights_on_model_save": True}
    assert config["bf16"] == {"enabled": True} and config["steps_per_print"] == 50
    clash = EngineConfig(kind="deepspeed", deepspeed_config={"gradient_clipping": 0.5})
    with pytest.raises(LangadaptError, match=r"deepspeed_config.gradient_clipping = 0.5 contradicts stage2.grad_clip"):
        deepspeed_config(stage, "stage2", clash, 1)
    owned = EngineConfig(kind="deepspeed", deepspeed_config={"optimizer": {"type": "Adam"}})
    with pytest.raises(LangadaptError, match="deepspeed_config.optimizer: langadapt sets"):
        deepspeed_config(stage, "stage2", owned, 1)


def test_every_config_field_has_a_docstring() -> None:
    from langadapt.recipe.train import CheckpointConfig

    for cls in (OptimizerConfig, ScheduleConfig, CheckpointConfig, TrainStageConfig, EngineConfig):
        for name, field in cls.model_fields.items():
            assert field.description, f"{cls.__name__}.{name} has no docstring"
