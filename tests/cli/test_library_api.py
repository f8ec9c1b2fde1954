"""`from langadapt import ...`: the documented names exist, import lazily, and `fit` output loads alone."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import langadapt

REPO = Path(__file__).resolve().parents[2]


def test_import_langadapt_loads_neither_torch_nor_deepspeed() -> None:
    """In a fresh interpreter: no torch (so no CUDA state) and no deepspeed until a name is used."""
    code = ("import sys, langadapt; heavy = sorted(m for m in ('torch', 'deepspeed', 'transformers') "
            "if m in sys.modules); print(heavy); langadapt.build_stream; "
            "print('deepspeed' in sys.modules, 'torch' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split("\n")[:2] == ["[]", "False False"]


def test_every_exported_name_resolves_and_is_documented() -> None:
    assert sorted(langadapt.__all__) == sorted([*langadapt._EXPORTS, *langadapt._SUBMODULES])
    for name in langadapt.__all__:
        value = getattr(langadapt, name)
        assert value.__doc__, f"langadapt.{name} has no docstring"
        assert name in dir(langadapt) and name in langadapt.__doc__
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        langadapt.nope  # noqa: B018


def test_every_entry_point_the_readme_names_exists() -> None:
    readme = (REPO / "README.md").read_text("utf-8")
    section = readme[readme.index("## Using it as a library"):readme.index("## Layout")]
    dotted = set(re.findall(r"`(langadapt(?:\.\w+)+)`", section))
    imports = re.findall(r"from (langadapt[\w.]*) import (?:\(([^)]*)\)|([\w, ]+))", section)
    imported = {(module, name.strip()) for module, *names in imports for name in ",".join(names).split(",")
                if name.strip()}
    assert len(dotted) >= 8 and len(imported) >= 9
    for path in dotted:
        module, _, attr = path.rpartition(".")
        target = __import__(module, fromlist=[attr])
        assert hasattr(target, attr), path
    for module, name in imported:
        assert hasattr(__import__(module, fromlist=[name]), name), f"from {module} import {name}"


def test_fit_with_a_tokenizer_writes_a_folder_that_loads_alone(tmp_path: Path) -> None:
    from helpers.synthetic import SyntheticStream, tiny_llama
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

    from langadapt import EngineConfig, TrainingJob, TrainStageConfig, checkpoint_model, fit

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.train_from_iterator(["det er en tekst"] * 20, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="</s>")
    config = TrainStageConfig(steps=4, micro_batch_size=2, seq_len=16, log_every=2,
                              checkpoint={"every_steps": 2, "keep_last": 2})
    model = tiny_llama(len(tokenizer))
    result = fit(model, SyntheticStream(len(tokenizer), 16),
                 TrainingJob.resolve(config, EngineConfig(), tmp_path, seed=0, tokenizer=tokenizer))
    loaded = AutoModelForCausalLM.from_pretrained(result.model_dir)
    reloaded_tokenizer = AutoTokenizer.from_pretrained(result.model_dir)
    assert reloaded_tokenizer("det er")["input_ids"] == tokenizer("det er")["input_ids"]
    ids = torch.tensor([reloaded_tokenizer("det er en tekst")["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(loaded(ids).logits, model.cpu().eval()(ids).logits, atol=1e-6)
    # the latest checkpoint (step 4 = the final weights) as a folder of its own
    folder = checkpoint_model(tmp_path / "checkpoints", result.model_dir, tmp_path / "from_checkpoint")
    from_checkpoint = AutoModelForCausalLM.from_pretrained(folder)
    assert AutoTokenizer.from_pretrained(folder)("det")["input_ids"] == tokenizer("det")["input_ids"]
    with torch.no_grad():
        assert torch.equal(from_checkpoint(ids).logits, loaded(ids).logits)
    step2 = AutoModelForCausalLM.from_pretrained(
        checkpoint_model(tmp_path / "checkpoints" / "step_00000002", result.model_dir, tmp_path / "step2"))
    assert not torch.equal(step2.lm_head.weight, loaded.lm_head.weight)  # an earlier point of training


def test_train_tokenizer_refuses_plain_strings_with_what_to_pass() -> None:
    """Plain strings used to fail deep in sampling with "too many values to unpack"."""
    from langadapt import TokenizerConfig, train_tokenizer
    from langadapt.errors import LangadaptError

    config = TokenizerConfig(vocab_size=400)
    with pytest.raises(LangadaptError, match=r"item 0 is str, not a \(lang, text\) pair .*\('nb', text\)"):
        train_tokenizer(config, ["det er en tekst", "en til"], None)
    with pytest.raises(LangadaptError, match="texts is one str"):
        train_tokenizer(config, "det er en tekst", None)
    consumed = []

    def pairs():  # checked as it is read: the good items before the bad one were already consumed
        for item in [("nb", "det er en tekst"), ("nb", "en til"), ("nb", 3)]:
            consumed.append(item)
            yield item
    with pytest.raises(LangadaptError, match=r"item 2 is \('nb', 3\)"):
        train_tokenizer(config, pairs(), None)
    assert len(consumed) == 3
    assert len(train_tokenizer(config, (("nb", "det er en tekst som er fin") for _ in range(30)), None)) > 256


def test_load_recipe_is_exported_and_assignment_is_validated() -> None:
    from pydantic import ValidationError

    loaded = langadapt.load_recipe(REPO / "recipes" / "tiny_norwegian_warm.yaml")
    with pytest.raises(ValidationError, match="valid integer"):
        loaded.recipe.stage2.steps = "many"
    loaded.recipe.stage2.steps = 700
    assert loaded.recipe.stage2.steps == 700
