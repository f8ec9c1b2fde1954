"""The whole plan: the NorMistral-7B-warm recipe's numbers, JSON shape, table, validation."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from langadapt.planning.flops import flops_per_token
from langadapt.planning.models import load_model_dims
from langadapt.planning.plan import StagePlanInput, build_plan, render_plan

# plan_mixture(...).to_dict() shape, written out so this test does not depend on the data package.
MIXTURE = {
    "total_tokens": 60_000 * 1024 * 4096,
    "effective_tokens": 2.27e11,
    "effective_ratio": 0.9,
    "sources": [
        {
            "name": "nb",
            "unique_tokens": 34e9,
            "tokens": 204e9,
            "epochs": 6.0,
            "effective_tokens": 1.79e11,
            "effective_ratio": 0.878,
            "share": 0.81,
        },
        {
            "name": "code",
            "unique_tokens": 1e12,
            "tokens": 47.7e9,
            "epochs": 0.0477,
            "effective_tokens": 47.7e9,
            "effective_ratio": 1.0,
            "share": 0.19,
        },
    ],
    "warnings": ["source nb: 6.0 epochs (D'/D = 0.878); above 4 epochs repeats are worth clearly less"],
}


def normistral_stages(mixture: dict | None = MIXTURE) -> list[StagePlanInput]:
    """NorMistral-7b-warm's published schedule: stage 1 1,000 x 1024 x 4096 (embeddings, ZeRO-1); stage 2 60,000 steps (ZeRO-3)."""
    return [
        StagePlanInput(
            name="stage1", steps=1000, seq_len=4096, global_batch=1024, trainable="embeddings", zero_stage=1
        ),
        StagePlanInput(
            name="stage2",
            steps=60_000,
            seq_len=4096,
            global_batch_tokens=1024 * 4096,
            trainable="all",
            zero_stage=3,
            activation_checkpointing=True,
            mixture=mixture,
        ),
    ]


def test_normistral_plan_numbers() -> None:
    model = load_model_dims("Mistral-7B-v0.1").with_vocab(32768)
    plan = build_plan(model, normistral_stages(), "mi250x", mfu=0.4, num_gpus=256, grid="lumi")
    json.dumps(plan)  # JSON-able as it is
    s1, s2 = plan["stages"]
    assert s1["tokens"] == 1000 * 1024 * 4096 == pytest.approx(4.2e9, rel=0.01)  # "about 4.2B tokens"
    assert s2["tokens"] == pytest.approx(252e9, rel=0.01)  # "about 252B tokens"
    assert s2["flops"] == pytest.approx(flops_per_token(model, 4096) * s2["tokens"])
    assert s1["flops"] / s1["tokens"] < 0.75 * s2["flops"] / s2["tokens"]  # frozen body: about 2/3
    assert s2["gpu_hours"] == pytest.approx(s2["flops"] / (0.4 * 191.5e12) / 3600)
    assert s2["wall_hours"] == pytest.approx(s2["gpu_hours"] / 256)
    assert s2["energy_kwh"] == pytest.approx(s2["gpu_hours"] * 280 * 1.2 / 1000)
    assert s2["co2_kg"] == pytest.approx(s2["energy_kwh"] * 24 / 1000)
    assert s2["grad_accum_steps"] == 4  # 1024 sequences / 256 GPUs / micro batch 1
    assert [src["epochs"] for src in s2["mixture"]["sources"]] == [6.0, 0.0477]
    assert s2["mixture"]["effective_ratio"] == 0.9
    assert set(s2["memory_gb"]) == {"zero0", "zero1", "zero2", "zero3", "fsdp"}
    assert not s2["memory_gb"]["zero0"]["fits"] and s2["memory_gb"]["zero3"]["fits"]
    assert s1["memory_gb"]["zero1"]["optimizer"] < 0.1  # only embeddings have Adam states
    assert plan["total"]["tokens"] == s1["tokens"] + s2["tokens"]
    assert plan["model"]["params"] == model.num_params()


def test_render_is_a_readable_table() -> None:
    plan = build_plan(load_model_dims("Mistral-7B-v0.1"), normistral_stages(), "h100", 0.4, 64)
    text = render_plan(plan)
    for needle in ("GPU-h", "kWh", "D'/D", "ZeRO-3", "stage2*", "nb", "252B", "warning: stage2: source nb"):
        assert needle in text
    assert len(max(text.splitlines(), key=len)) < 130


def test_warnings_for_mismatches() -> None:
    stages = normistral_stages({**MIXTURE, "total_tokens": 1e9, "warnings": []})
    plan = build_plan(load_model_dims("Llama-3.1-70B"), stages, "a100", 0.4, num_gpus=3)
    warnings = " ".join(plan["stages"][1]["warnings"])
    assert "mixture is planned for 1e+09 tokens" in warnings
    assert "does not split into 3 GPUs" in warnings
    assert "ZeRO-1 needs" in " ".join(plan["stages"][0]["warnings"])  # 70B weights alone: 141 GB


def test_with_the_real_mixture_planner() -> None:
    from langadapt.data import schedule

    mix = schedule.plan_mixture(
        [
            {"name": "nb", "unique_tokens": 34e9, "epochs": 6},
            {"name": "code", "unique_tokens": 1e12, "weight": 1},
        ],
        60_000 * 1024 * 4096,
    )
    plan = build_plan(load_model_dims("normistral-7b"), normistral_stages(mix.to_dict()), "h100", 0.4, 64)
    nb = plan["stages"][1]["mixture"]["sources"][0]
    assert nb["epochs"] == pytest.approx(6.0) and nb["effective_ratio"] == pytest.approx(0.878, abs=1e-3)


def test_stage_input_validation() -> None:
    with pytest.raises(ValidationError, match="global_batch_tokens or global_batch"):
        StagePlanInput(name="s", steps=10, seq_len=128)
    with pytest.raises(ValidationError, match="extra"):
        StagePlanInput(name="s", steps=10, seq_len=128, global_batch=8, zero=3)
    with pytest.raises(ValidationError):
        StagePlanInput(name="s", steps=10, seq_len=128, global_batch=8, trainable="body")
    assert StagePlanInput(name="s", steps=10, seq_len=128, global_batch=8).batch_tokens == 1024
    doc = StagePlanInput.model_fields["trainable"].description
    assert doc and "embeddings" in doc  # every field is documented
