"""A `base_model.architecture` that transformers cannot build (init: scratch) is refused by the
dry run and by the real run before any stage, as one located line: the check and the scratch
stage build through the same `planning.models.architecture_config`.

Before it, an unknown model type passed the dry run and failed after the data and tokenizer
stages with transformers' list of every model type; a hidden size the heads do not divide was a
traceback from huggingface_hub's config validation.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers.recipes import scratch_recipe

from langadapt.errors import LangadaptError
from langadapt.planning.models import architecture_config

CASES = {
    "unknown model type": ("{model_type: lama}", "base_model.architecture.model_type: 'lama' is not a model type",
                           "did you mean llama"),
    "heads do not divide the hidden size": ("{model_type: llama, hidden_size: 32, num_attention_heads: 3}",
                                            "base_model.architecture: llama refuses these fields",
                                            "not a multiple of the number of attention heads"),
    "text where a number belongs": ("{model_type: llama, hidden_size: wide}",
                                    "base_model.architecture: llama refuses these fields", "hidden_size"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_dry_run_and_the_run_refuse_it_before_any_stage(case: str, tmp_path: Path) -> None:
    architecture, *fragments = CASES[case]
    (tmp_path / "nb.txt").write_text("Dette er en setning om fjell og fjorder.\n" * 200, encoding="utf-8")
    text = scratch_recipe(tmp_path, "arch").replace("{model_type: llama}", architecture)
    text += "stage2: {steps: 1, seq_len: 32, micro_batch_size: 1}\n"  # the corpus's epochs are not under test
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(text, encoding="utf-8")
    line = text.splitlines().index("  architecture: " + architecture) + 1
    for args in (["--dry-run"], []):
        done = subprocess.run([sys.executable, "-m", "langadapt.cli", "run", str(recipe), *args],
                              capture_output=True, text=True, timeout=300, check=False)
        errors = [row for row in done.stderr.splitlines() if row.startswith("langadapt: error:")]
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert len(errors) == 1 and f"{recipe}:{line}:" in errors[0], done.stderr
        assert all(fragment in errors[0] for fragment in fragments), errors[0]
    assert not (tmp_path / "runs" / "arch").exists(), "a stage ran before the refusal"


def test_a_valid_architecture_builds_the_config_the_scratch_stage_uses() -> None:
    config = architecture_config({"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4})
    assert (config.model_type, config.hidden_size, config.num_attention_heads) == ("llama", 32, 4)
    with pytest.raises(LangadaptError, match="model_type: required"):
        architecture_config({"hidden_size": 32})
