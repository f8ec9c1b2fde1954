"""One count of the ids a tokenizer.json uses (`inputs.model_folder.tokenizer_id_count`), and no
other module computing it (issue 39: it was written four times, one of them without Unigram)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from helpers.real_bases import BASES, build_tokenizer_folder

from langadapt.inputs.model_folder import tokenizer_id_count

PACKAGE = Path(__file__).resolve().parents[2] / "langadapt"


def test_model_vocabulary_and_added_tokens_beyond_it() -> None:
    bpe = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}}, "added_tokens": [{"id": 7, "content": "<x>"}]}
    assert tokenizer_id_count(bpe) == 8  # a hole below an added token still needs its rows
    assert tokenizer_id_count({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}}}) == 2
    unigram = {"model": {"type": "Unigram", "vocab": [["<unk>", 0.0], ["a", -1.0], ["b", -2.0]]}}
    assert tokenizer_id_count(unigram) == 3  # ids by position
    assert tokenizer_id_count({"model": {"type": "WordLevel"}}) is None  # nothing to count: the callers say so
    assert tokenizer_id_count({}) is None


@pytest.mark.slow  # 4-21 s: the real tokenizers converted
@pytest.mark.parametrize("base", [BASES[name] for name in ("mistral-sp-legacy", "nemo-tekken", "gpt2-tied")],
                         ids=lambda base: base.name)
def test_real_tokenizers_count_what_the_tokenizers_library_counts(base, shared_dir: Path, tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    path = build_tokenizer_folder(base, shared_dir, tmp_path) / "tokenizer.json"
    expected = Tokenizer.from_file(str(path)).get_vocab_size(with_added_tokens=True)
    assert tokenizer_id_count(json.loads(path.read_text(encoding="utf-8"))) == expected


@pytest.mark.slow  # parses every module: ~3 s
def test_no_other_module_counts_the_added_tokens_ids() -> None:
    """The count's mark, a function that reads a tokenizer.json's "added_tokens" and calls max(),
    only in inputs/model_folder.py."""
    counting = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef):
                continue
            inside = list(ast.walk(node))
            reads = any(isinstance(n, ast.Constant) and n.value == "added_tokens" for n in inside)
            if reads and any(isinstance(n, ast.Call) and ast.unparse(n.func) == "max" for n in inside):
                counting.append(f"{path.relative_to(PACKAGE)}:{node.name}")
    assert counting == ["inputs/model_folder.py:tokenizer_id_count"], counting
