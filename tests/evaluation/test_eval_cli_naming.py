"""`langadapt eval A --compare B`: every model keeps its own column, named after where it came from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.synthetic import tiny_llama
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from langadapt import cli
from langadapt.errors import LangadaptError
from langadapt.evaluation.naming import derived_name, split_named, unique_names

TEXT = "Dette er en kort tekst på norsk bokmål om Debian og pakker, og den er ikke lang. " * 3


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.train_from_iterator([TEXT] * 5, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="</s>")


def _save_model(folder: Path, seed: int, tokenizer: PreTrainedTokenizerFast) -> Path:
    tiny_llama(len(tokenizer), seed=seed).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("suite")
    (root / "nb.txt").write_text(TEXT, "utf-8")
    path = root / "local.yaml"
    path.write_text(f"name: local\ntasks:\n  - {{kind: bpb, files: {{nb_local: [{root / 'nb.txt'}]}}}}\n", "utf-8")
    return path


def test_two_folders_named_model_are_both_reported(tmp_path: Path, suite: Path, tokenizer, monkeypatch, capsys) -> None:
    adapted = _save_model(tmp_path / "runs" / "demo" / "stage2" / "model", seed=1, tokenizer=tokenizer)
    reference = _save_model(tmp_path / "runs" / "other" / "export" / "model", seed=2, tokenizer=tokenizer)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["eval", str(adapted), "--compare", str(reference), "--suite", str(suite)]) == 0
    assert "models: demo/stage2, other/export (deltas against other/export)" in capsys.readouterr().out
    results = json.loads((tmp_path / "eval_demo_stage2" / "results.json").read_text())  # named after the model
    assert list(results["models"]) == ["demo/stage2", "other/export"] and results["reference"] == "other/export"
    bpb = {name: per["nb_local"]["bits_per_byte"] for name, per in results["models"].items()}
    assert bpb["demo/stage2"] != bpb["other/export"]  # two models scored, not one twice
    assert results["deltas"]["demo/stage2"]["nb_local"]["bits_per_byte"] == pytest.approx(
        bpb["demo/stage2"] - bpb["other/export"])
    assert results["model_paths"]["other/export"] == str(reference)
    # the same folders outside a run layout, compared under a name of one's own
    plain_a = _save_model(tmp_path / "x" / "model", seed=1, tokenizer=tokenizer)
    plain_b = _save_model(tmp_path / "y" / "model", seed=3, tokenizer=tokenizer)
    assert cli.main(["eval", str(plain_a), "--name", "mine", "--compare", str(plain_b), f"base={reference}",
                     "--suite", str(suite)]) == 0
    results = json.loads((tmp_path / "eval_mine" / "results.json").read_text())
    assert list(results["models"]) == ["mine", "model", "base"] and results["reference"] == "model"


def test_names_fall_back_to_disambiguated_folders(tmp_path: Path) -> None:
    a, b = tmp_path / "one" / "model", tmp_path / "two" / "model"
    for folder in (a, b):
        folder.mkdir(parents=True)
    assert unique_names([a, b], [None, None]) == ["one/model", "two/model"]
    assert unique_names([a, a], [None, None]) == ["model", "model#2"]  # the same folder given twice
    assert unique_names([a], [None], taken={"model"}) == ["one/model"]
    assert unique_names([a, b], ["adapted", None]) == ["adapted", "model"]
    assert derived_name(tmp_path / "runs" / "r" / "stage1" / "model") == "r/stage1"
    assert derived_name(tmp_path / "runs" / "r" / "embeddings" / "model") == "r/embeddings"
    assert split_named("ref=runs/x") == ("ref", "runs/x") and split_named("runs/x") == (None, "runs/x")
    with pytest.raises(LangadaptError, match="model name 'x' is used twice"):
        unique_names([a, b], ["x", "x"])
    with pytest.raises(LangadaptError, match="model name 'base' is used twice"):
        unique_names([a], ["base"], taken={"base"})


def test_name_on_a_run_directory_is_one_clear_error(tmp_path: Path, suite: Path, tokenizer, capsys) -> None:
    _save_model(tmp_path / "run" / "stage2" / "model", seed=1, tokenizer=tokenizer)
    code = cli.main(["eval", str(tmp_path / "run"), "--name", "x", "--suite", str(suite), "--out", str(tmp_path / "o")])
    assert code == 2 and "--name x: names a model folder" in capsys.readouterr().err
