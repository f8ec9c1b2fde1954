"""Free-string and unbounded knobs are refused at load, on their recipe line (review R1), not when
a model loads after the CPU stages and the queue."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest
from pydantic import ValidationError

from langadapt.errors import LangadaptError
from langadapt.recipe import load_recipe
from langadapt.recipe.evaluation import EvaluationConfig, GenerateOptions
from langadapt.recipe.train import AttentionKernel, EngineConfig, MixtureEntry

ROOT = Path(__file__).resolve().parents[2]
TINY = "recipes/tiny_norwegian_warm.yaml"


def test_attention_kernels_are_the_ones_transformers_registers() -> None:
    """Every name is one the installed transformers accepts (its AttentionInterface plus eager)."""
    from transformers import AttentionInterface

    accepted = {"eager", *AttentionInterface._global_mapping}
    assert set(get_args(AttentionKernel)) <= accepted
    assert {"sdpa", "eager", "flash_attention_2", "flash_attention_3", "flex_attention"} <= set(get_args(AttentionKernel))


@pytest.mark.parametrize("kernel", get_args(AttentionKernel))
def test_each_attention_kernel_loads(kernel: str) -> None:
    assert EngineConfig(attn_implementation=kernel).attn_implementation == kernel


@pytest.mark.parametrize(("override", "message"), [
    ("engine.attn_implementation=sdap", "engine.attn_implementation: Input should be 'sdpa', 'eager'"),
    ("engine.attn_implementation=flash_attention", "engine.attn_implementation: Input should be"),
    ("evaluation.device=gpu", "evaluation.device: 'gpu' is not a torch device: use cpu, cuda, cuda:N, mps or xpu"),
    ("evaluation.device=cuda0", "evaluation.device: 'cuda0' is not a torch device"),
    ("evaluation.device=auto", "evaluation.device: 'auto' is not a torch device"),
    ("evaluation.window=2000000", "evaluation.window: Input should be less than or equal to 1048576"),
    ("evaluation.generate.max_new_tokens=2000000",
     "evaluation.generate.max_new_tokens: Input should be less than or equal to 1048576"),
    ("stage1.mixture={xx: {weight: 1000000000}}", "stage1.mixture.xx.weight: Input should be less than or equal to"),
])
def test_a_bad_value_is_one_located_line_at_load(override: str, message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    with pytest.raises(LangadaptError) as caught:
        load_recipe(TINY, [override])
    line = str(caught.value)
    assert line.startswith(f"--set {override}: {message}"), line
    assert "\n" not in line


@pytest.mark.parametrize("device", ["cpu", "cuda", "cuda:1", "mps", "xpu:0", None])
def test_torch_devices_load(device: str | None) -> None:
    assert EvaluationConfig(device=device).device == device


def test_the_bounds_keep_real_values() -> None:
    assert EvaluationConfig(window=1_048_576).window == 1_048_576
    assert GenerateOptions(max_new_tokens=4096).max_new_tokens == 4096
    assert MixtureEntry(weight=1_000_000).weight == 1_000_000
    with pytest.raises(ValidationError):
        MixtureEntry(weight=-1)


def test_a_recipe_file_line_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    text = (ROOT / TINY).read_text()
    assert "\nengine:\n" in text
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("\nengine:\n", "\nengine:\n  attn_implementation: sdap\n", 1))
    with pytest.raises(LangadaptError, match=rf"^{bad}:\d+: engine.attn_implementation: Input should be"):
        load_recipe(bad, [])
