"""FLOPs, GPU-hours, energy and CO2 against published numbers."""

from __future__ import annotations

import pytest

from langadapt.errors import LangadaptError
from langadapt.planning.flops import (
    attention_flops_per_token,
    flops_per_token,
    mfu,
    tokens_per_second,
)
from langadapt.planning.models import ModelDims, load_model_dims
from langadapt.recipe.hardware import co2_kg, energy_kwh, get_hardware, gpu_hours, grid_intensity


def test_palm_540b_model_flops_utilisation() -> None:
    # PaLM appendix B: 6N + 12 L H Q T per token; 238.3K tokens/s on 6144 TPU v4 (275 TFLOP/s) is 46.2% MFU.
    per_token = 6 * 540.35e9 + attention_flops_per_token(layers=118, attn_dim=48 * 256, seq_len=2048)
    assert mfu(238.3e3, per_token, 6144 * 275e12) == pytest.approx(0.462, abs=5e-4)
    assert tokens_per_second(0.462, per_token, 6144 * 275e12) == pytest.approx(238.3e3, rel=1e-3)


def test_full_training_is_6n_plus_attention() -> None:
    m = load_model_dims("Mistral-7B-v0.1")
    n = m.num_params() - m.vocab * m.hidden  # the untied input table is a lookup, not a matmul
    assert flops_per_token(m, 4096, "all", attention=False) == 6 * n
    assert flops_per_token(m, 4096, "all") - 6 * n == 12 * 32 * 4096 * 4096


def test_frozen_body_stage_costs_about_two_thirds_of_a_full_step() -> None:
    m = load_model_dims("Mistral-7B-v0.1")
    frozen = flops_per_token(m, 4096, "embeddings", attention=False)
    head = m.vocab * m.hidden
    assert frozen == 4 * (m.body_params() + head) + 2 * head
    assert frozen / flops_per_token(m, 4096, "all", attention=False) == pytest.approx(2 / 3, abs=0.02)
    # When the embeddings are half the model (tiny-en-llama) the saving shrinks: 0.80 in FLOPs;
    # the 0.88 measured in wall time also pays for non-matmul work (the softmax over 8k logits).
    tiny = load_model_dims("tiny-en-llama")
    ratio = flops_per_token(tiny, 256, "embeddings") / flops_per_token(tiny, 256, "all")
    assert 0.78 < ratio < 0.9
    with pytest.raises(ValueError):
        flops_per_token(m, 4096, "body")  # type: ignore[arg-type]


def test_gpu_hours_energy_and_co2() -> None:
    h100 = get_hardware("h100")
    assert (h100.peak_flops, h100.watts, h100.memory_gb) == (989e12, 700, 80)
    assert (
        get_hardware("MI250X-GCD").peak_flops == 191.5e12 and get_hardware("lumi").watts == 280
    )  # half of 560 W
    assert get_hardware("a100").peak_flops == 312e12
    # 1e21 FLOPs at 50% of 1e15 FLOP/s: 2e6 s = 555.6 device-hours.
    hours = gpu_hours(1e21, 0.5, 1e15)
    assert hours == pytest.approx(2e6 / 3600)
    assert energy_kwh(1000, 700, pue=1.2) == pytest.approx(840)
    assert co2_kg(840, grid_intensity("lumi")) == pytest.approx(840 * 24 / 1000)
    assert grid_intensity(350) == 350


def test_hardware_errors_are_clear() -> None:
    with pytest.raises(LangadaptError, match="unknown"):
        get_hardware("tpu-v9")
    with pytest.raises(LangadaptError, match="custom"):
        get_hardware("custom", peak_tflops=100)
    assert get_hardware("custom", peak_tflops=100, watts=300, memory_gb=48).peak_flops == 100e12
    with pytest.raises(LangadaptError, match="mfu"):
        gpu_hours(1e20, 40, 1e15)
    with pytest.raises(LangadaptError, match="grid"):
        grid_intensity("mars")


def test_throughput_anchor_olmo_core_7b_on_h100() -> None:
    # OLMo-core's published 7B figure: on H100 ~10K tokens/s per GPU at 47-48% MFU (seq 4096): same ballpark.
    olmo = load_model_dims("OLMo-2-7B")
    assert isinstance(olmo, ModelDims)
    tps = tokens_per_second(0.475, flops_per_token(olmo, 4096), get_hardware("h100").peak_flops)
    assert 8_500 < tps < 10_500
