"""The pipeline through the real CLI on real-vocabulary bases (tests/helpers/real_bases.py).

Every base runs the data, tokenizer and embeddings stages (`--until embeddings`), as a user
adapting Mistral-7B, Mistral-Nemo (its Hub folder, with mistral-common installed) or a tied
GPT-2-vocabulary model would; the Mistral SentencePiece base also runs every stage to the export
and a second time (a fixed point).
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest
from helpers.cli import run_cli
from helpers.real_bases import BASES, build_base

from langadapt.tokenizer.loading import load_tokenizer

RECIPE = """\
name: {name}
run_root: {root}/runs
seed: 7
init: warm
base_model:
  path: {base}
data:
  sources:
    - {{name: nb, path: {shared}/corpora/nb.debian-handbook.train.jsonl.gz,
       valid_path: {shared}/corpora/nb.debian-handbook.valid.jsonl.gz, lang: nb, role: target, weight: 0.8}}
    - {{name: en, path: {shared}/corpora/en.debian-handbook.train.jsonl.gz,
       valid_path: {shared}/corpora/en.debian-handbook.valid.jsonl.gz, lang: en, role: replay, weight: 0.2,
       max_docs: 60}}
tokenizer:
  kind: inherit
  vocab_size: 3072
stage1:
  steps: 4
  micro_batch_size: 2
  seq_len: 64
  optimizer: {{lr: 3.0e-3}}
  schedule: {{kind: constant, warmup_steps: 1}}
  checkpoint: {{every_steps: 2}}
stage2:
  steps: 4
  schedule: {{kind: cosine, warmup_steps: 1}}
evaluation:
  suites: [eval/monolingual.yaml]
  max_bytes_per_lang: 3000
  window: 64
export:
  dtype: float32
"""


langadapt = partial(run_cli, timeout=1800)


def write_recipe(root: Path, name: str, shared_dir: Path) -> Path:
    base = build_base(name, shared_dir, root / "base")
    recipe = root / "recipe.yaml"
    recipe.write_text(RECIPE.format(name=name, root=root, base=base, shared=shared_dir))
    return recipe


@pytest.mark.slow
@pytest.mark.parametrize("name", list(BASES))
def test_tokenizer_and_embeddings_stages_on_a_real_base(name, tmp_path, shared_dir):
    recipe = write_recipe(tmp_path, name, shared_dir)
    dry = langadapt("run", str(recipe), "--dry-run")
    assert dry.returncode == 0, dry.stderr[-2000:]
    result = langadapt("run", str(recipe), "--until", "embeddings")
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "runs" / name
    summary = json.loads((run / "embeddings" / "mapping.json").read_text().split("\n", 1)[0][len('{"summary": '):-1])
    assert summary["fallback"] == 0 and summary["byte_segmented"] == 0
    assert summary["copied"] > 500 and summary["decomposed"] > 500
    base, new = load_tokenizer(tmp_path / "base"), load_tokenizer(run / "embeddings" / "model")
    for role in ("bos", "eos", "unk"):
        assert getattr(new, f"{role}_token") == getattr(base, f"{role}_token"), role
    config = json.loads((run / "embeddings" / "model" / "config.json").read_text())
    assert config["vocab_size"] >= len(new) and config["tie_word_embeddings"] == BASES[name].model["tie_word_embeddings"]


@pytest.mark.slow
def test_every_stage_on_the_mistral_sentencepiece_base_and_a_fixed_point(tmp_path, shared_dir):
    recipe = write_recipe(tmp_path, "mistral-sp-legacy", shared_dir)
    result = langadapt("run", str(recipe))
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "runs" / "mistral-sp-legacy"
    models = json.loads((run / "evaluate" / "results.json").read_text())["models"]
    assert models["adapted"]["nb"]["bits_per_byte"] < models["init"]["nb"]["bits_per_byte"]
    from transformers import AutoTokenizer

    exported = AutoTokenizer.from_pretrained(run / "export" / "model")
    ours = load_tokenizer(run / "tokenizer" / "tokenizer")
    text = "Pakkebehandleren åpner /etc/apt/sources.list 😀"
    assert exported(text)["input_ids"] == ours(text)["input_ids"]
    again = langadapt("run", str(recipe))
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stderr.count("skip (complete, inputs unchanged)") == 7


@pytest.mark.slow
def test_extension_of_mistral_through_every_stage(tmp_path, shared_dir):
    """tokenizer.kind extend on Mistral-7B's 32,000 SentencePiece ids, as a user runs it: a size not
    above the base's is one located line before anything runs; then every stage with stage 1 training
    only the new rows, an export without the base's tokenizer.model (it cannot express the extension;
    the card says so) that encodes as the run's tokenizer, and a fixed point. (Nemo's regenerated
    tekken.json is tested in tests/export/test_export_extended_vocab.py: through every stage its
    131k-row matrices made this test take minutes.)"""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    recipe = write_recipe(tmp_path, "mistral-sp-legacy", shared_dir)
    text = recipe.read_text().replace("kind: inherit\n  vocab_size: 3072", "kind: extend\n  vocab_size: 32000")
    recipe.write_text(text.replace("stage1:\n", "embeddings: {pad_vocab_to_multiple_of: 64}\nstage1:\n  train_rows: new\n"))
    refused = langadapt("run", str(recipe))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    line = recipe.read_text().splitlines().index("  vocab_size: 32000") + 1
    assert f"{recipe}:{line}: tokenizer.vocab_size: 32,000 is not above the base's 32,000 ids" in refused.stderr

    recipe.write_text(recipe.read_text().replace("vocab_size: 32000", "vocab_size: 32528"))
    result = langadapt("run", str(recipe))
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "runs" / "mistral-sp-legacy"
    base_rows = load_file(tmp_path / "base" / "model.safetensors")["model.embed_tokens.weight"]
    stage1 = load_file(run / "stage1" / "model" / "model.safetensors")["model.embed_tokens.weight"]
    assert stage1.shape[0] == 32576  # 32,528 padded to a multiple of 64
    assert torch.equal(stage1[:32000], base_rows) and not torch.equal(stage1[32000:32528], base_rows[:528])

    export = run / "export" / "model"
    assert not (export / "tokenizer.model").exists() and (tmp_path / "base" / "tokenizer.model").exists()
    assert "tokenizer.model` is not included" in (export / "README.md").read_text()
    ours = load_tokenizer(run / "tokenizer" / "tokenizer")
    sample = "Systemadministratoren installerer pakkene med apt-get 😀"
    assert AutoTokenizer.from_pretrained(export)(sample)["input_ids"] == ours(sample)["input_ids"]
    assert any(i >= 32000 for i in ours(sample)["input_ids"])
    again = langadapt("run", str(recipe))
    assert again.returncode == 0 and again.stderr.count("skip (complete, inputs unchanged)") == 7
