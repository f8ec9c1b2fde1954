"""Recipe mistakes through the real CLI: the message names what the user wrote (the typo'd key,
the `--set` flag, the directory) and says how to fix it; one line, exit 2."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers.cli import run_cli

RECIPE = """\
name: errs
run_root: {root}/runs
init: scratch
base_model:
  architecture: {{model_type: llama, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1,
                 num_attention_heads: 2, num_key_value_heads: 1}}
data:
  sources:
    - {{name: nb, path: {corpus}, lang: nb}}
tokenizer:
  kind: byte_bpe
  vocab_size: 300
"""


langadapt = run_cli


def error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("langadapt: error:")]
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture()
def recipe(tmp_path: Path) -> Path:
    corpus = tmp_path / "nb.txt"
    corpus.write_text("\n\n".join(f"Dette er setning nummer {i} om ord{i} og tekst{i}." for i in range(40)))
    path = tmp_path / "recipe.yaml"
    path.write_text(RECIPE.format(root=tmp_path, corpus=corpus))
    return path


def test_a_typo_in_a_top_level_key_is_named_with_did_you_mean(recipe: Path) -> None:
    recipe.write_text(recipe.read_text().replace("tokenizer:", "tokenzier:"))
    line = error_line(langadapt("run", str(recipe)))
    assert "recipe.yaml:10: tokenzier: unknown key; did you mean tokenizer?" in line


def test_an_unknown_set_key_is_blamed_on_the_flag(recipe: Path) -> None:
    line = error_line(langadapt("run", str(recipe), "--set", "stage2.lr_sheduler=cosine", "--dry-run"))
    assert "--set stage2.lr_sheduler=cosine: stage2.lr_sheduler: unknown key" in line
    assert "recipe.yaml" not in line


def test_a_bad_set_value_is_blamed_on_the_flag(recipe: Path) -> None:
    line = error_line(langadapt("run", str(recipe), "--set", "stage1.steps=many", "--dry-run"))
    assert "--set stage1.steps=many: stage1.steps: Input should be a valid integer" in line


def test_a_directory_given_as_the_recipe(tmp_path: Path) -> None:
    line = error_line(langadapt("run", str(tmp_path)))
    assert f"{tmp_path}: is a directory; give the recipe YAML file inside it" in line


def test_a_recipe_that_is_not_utf8(recipe: Path) -> None:
    recipe.write_bytes(recipe.read_bytes() + b"# bl\xe5\n")
    assert "a recipe must be UTF-8 text" in error_line(langadapt("run", str(recipe)))


def test_latin1_corpus_suggests_converting_not_skipping(recipe: Path, tmp_path: Path) -> None:
    (tmp_path / "nb.txt").write_bytes("Blåbærsyltetøy er godt.\n\nMer tekst.\n".encode("latin-1"))
    line = error_line(langadapt("run", str(recipe), "--until", "data"))
    assert "invalid UTF-8 at byte 2 (line 1)" in line
    assert f"iconv -f cp1252 -t utf-8 {tmp_path / 'nb.txt'} > {tmp_path / 'nb.utf8.txt'}" in line
    assert "skip drops every document with a bad byte" in line
    assert not list((tmp_path / "runs").glob("*/*/COMPLETE"))


def test_set_reaches_an_entry_of_a_list(recipe: Path) -> None:
    line = error_line(langadapt("run", str(recipe), "--set", "data.sources[0].path=/nope/*.txt", "--dry-run"))
    assert "--set data.sources[0].path=/nope/*.txt: data.sources[0].path: '/nope/*.txt' matches no file" in line
    line = error_line(langadapt("run", str(recipe), "--set", "data.sources[2].weight=1", "--dry-run"))
    assert "--set data.sources[2].weight: sources has 1 entry, no [2]" in line
