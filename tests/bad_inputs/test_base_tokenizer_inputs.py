"""A corrupt base tokenizer.json (issue 38), through the real CLI and through the library's loader:
one `langadapt: error:` line naming the file and the entry, exit 2, no traceback, nothing written,
and for the CLI a refusal before torch is imported.

Before: a merges list that is not a list, a merge that is not a pair, a merge naming a token the
vocabulary lacks, two tokens on one id, or anything else the `tokenizers` loader refuses passed
`--dry-run` and ended as a traceback at the tokenizer stage, whatever `tokenizer.kind`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.cli import run_cli_probing_torch

from langadapt.errors import LangadaptError
from langadapt.inputs.tokenizer_json import tokenizer_json_problem
from langadapt.tokenizer.stage import load_base_tokenizer

REPO = Path(__file__).resolve().parents[2]
RECIPE = """\
name: warm
run_root: {root}/runs
base_model:
  path: {root}/base
data:
  force_epochs: true
  sources:
    - {{name: nb, path: {corpus}, lang: nb}}
tokenizer:
  kind: {kind}
{size}stage1:
  seq_len: 64
"""
SIZES = {"inherit": "  vocab_size: 300\n", "extend": "  vocab_size: 8500\n", "keep_base": ""}
"""tiny-en-llama has 8,192 ids: extend's vocab_size is the final size, above them; keep_base has none."""
TEXTS = [f"Dokument {i}: dette er en setning om fjell og fjorder, nummer {i}." for i in range(200)]
MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer_config.json")


def _string_merges(data: dict[str, Any]) -> None:
    """The merges in the "a b" form tokenizers < 0.20 wrote, the 13th one without its space."""
    data["model"]["merges"] = [" ".join(pair) for pair in data["model"]["merges"]]
    data["model"]["merges"][12] = "abc"


def _two_tokens_on_one_id(data: dict[str, Any]) -> None:
    vocab = data["model"]["vocab"]
    by_id = {token_id: token for token, token_id in vocab.items()}
    vocab[by_id[300]] = 301


CORRUPTIONS: dict[str, tuple[Callable[[dict[str, Any]], None], str, tuple[str, ...]]] = {
    "merges_not_a_list": (lambda d: d["model"].__setitem__("merges", {"Ġ t": 0}), "inherit",
                          ("tokenizer.json: model.merges: expected a list of merges, found dict",)),
    "string_merge_without_space": (_string_merges, "extend",
                                   ("tokenizer.json: model.merges[12]: 'abc' is not a pair of tokens",)),
    "list_merge_of_three": (lambda d: d["model"]["merges"].__setitem__(12, ["Ġ", "t", "h"]), "keep_base",
                            ("tokenizer.json: model.merges[12]: ['Ġ', 't', 'h'] is not a pair of tokens",)),
    "merge_token_not_in_vocab": (lambda d: d["model"]["merges"].__setitem__(12, ["Ġ", "zzzq"]), "inherit",
                                 ("tokenizer.json: model.merges[12]: 'zzzq' is not in model.vocab",)),
    "two_tokens_on_one_id": (_two_tokens_on_one_id, "extend",
                             ("tokenizer.json: model.vocab: ", " both have id 301: ")),
    "library_refuses": (lambda d: d.__setitem__("pre_tokenizer", {"type": "NoSuchSplitter"}), "keep_base",
                        ("tokenizer.json: pre_tokenizer: the tokenizers library cannot load it (",
                         "PreTokenizerUntagged)")),
}
"""Corruption -> (what it does to tiny-en-llama's tokenizer.json, the tokenizer.kind its CLI run uses
(each kind twice), what the error line says after the file)."""


def _corrupt_base(tmp_path: Path, tiny_en_llama: Path, corruption: str) -> Path:
    """tiny-en-llama's folder (links to its files) with a corrupted tokenizer.json of its own."""
    base = tmp_path / "base"
    base.mkdir()
    for name in MODEL_FILES:
        (base / name).symlink_to(tiny_en_llama / name)
    data = json.loads((tiny_en_llama / "tokenizer.json").read_text(encoding="utf-8"))
    CORRUPTIONS[corruption][0](data)
    (base / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return base


@pytest.mark.slow
@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_a_corrupt_base_tokenizer_is_one_line_at_the_dry_run(tmp_path: Path, tiny_en_llama: Path,
                                                             corruption: str) -> None:
    base = _corrupt_base(tmp_path, tiny_en_llama, corruption)
    corpus = tmp_path / "nb.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS), encoding="utf-8")
    _, kind, expected = CORRUPTIONS[corruption]
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE.format(root=tmp_path, corpus=corpus, kind=kind, size=SIZES[kind]))
    result, imported_torch = run_cli_probing_torch("run", str(recipe), "--dry-run")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and "panicked" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("langadapt: error:")]
    assert len(lines) == 1, result.stderr
    assert f"recipe.yaml:4: base_model.path: {base / 'tokenizer.json'}: " in lines[0], lines[0]
    assert all(fragment in lines[0] for fragment in expected), lines[0]
    assert not imported_torch, "refused after torch was imported"
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("*")), "the dry run wrote"


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_the_tokenizer_stage_refuses_it_too(tmp_path: Path, tiny_en_llama: Path, corruption: str) -> None:
    """A library caller that skips the preflight check (the tokenizer stage's own loading of the
    base) gets the same line as a LangadaptError, before transformers loads anything."""
    base = _corrupt_base(tmp_path, tiny_en_llama, corruption)
    with pytest.raises(LangadaptError) as caught:
        load_base_tokenizer(str(base))
    assert str(caught.value).startswith(f"base_model.path: {base / 'tokenizer.json'}: "), caught.value
    assert all(fragment in str(caught.value) for fragment in CORRUPTIONS[corruption][2]), caught.value


def test_two_tokens_on_one_id_are_named(tiny_en_llama: Path) -> None:
    """The `tokenizers` loader accepts this one (a row silently shared): the check names both tokens."""
    data = json.loads((tiny_en_llama / "tokenizer.json").read_text(encoding="utf-8"))
    by_id = {token_id: token for token, token_id in data["model"]["vocab"].items()}
    _two_tokens_on_one_id(data)
    problem = tokenizer_json_problem(Path("tokenizer.json"), data)
    assert problem == (f"tokenizer.json: model.vocab: {by_id[300]!r} and {by_id[301]!r} both have id 301: "
                       "one of them would have no row of its own")


def test_a_real_tokenizer_has_no_problem(tiny_en_llama: Path) -> None:
    path = tiny_en_llama / "tokenizer.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    assert tokenizer_json_problem(path, data) is None
    data["model"]["merges"] = [" ".join(pair) for pair in data["model"]["merges"]]  # the "a b" form
    assert tokenizer_json_problem(path, data) is None


@pytest.mark.parametrize(("model", "problem"), [
    ({"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"], "a b"]},
     "model.merges[1]: 'a b' is a string among lists"),
    ({"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": [["a", "b"]]},
     "model.merges[0]: the token it makes, 'ab', is not in model.vocab"),
    ({"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]],
      "continuing_subword_prefix": "##"},  # the library panics on this one
     "model.merges[0]: 'b' does not start with continuing_subword_prefix '##'"),
    ({"type": "BPE", "vocab": {"a": 0, "b": -1}, "merges": []}, "model.vocab['b']: -1 is not a token id"),
])
def test_entries_the_library_refuses_badly_are_named(model: dict[str, Any], problem: str) -> None:
    assert (tokenizer_json_problem(Path("t.json"), {"model": model}) or "").startswith(f"t.json: {problem}")
