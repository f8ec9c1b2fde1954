"""Tokenizer metrics on hand-checkable tokenizers, the table and the chart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from langadapt.tokenizer.metrics import compare_tokenizers, plot_fertility, render_table, tokenizer_metrics


@pytest.fixture(scope="module")
def bytes_only() -> Tokenizer:
    """Byte-level BPE without merges: one token per UTF-8 byte (the leading space is its own)."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(sorted(alphabet))}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


@pytest.fixture(scope="module")
def whole_words() -> Tokenizer:
    """One token per whitespace word."""
    tok = Tokenizer(models.WordLevel({"hei": 0, "på": 1, "deg": 2, "[UNK]": 3}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tok


def test_metrics_of_a_byte_tokenizer(bytes_only) -> None:
    m = tokenizer_metrics(bytes_only, ["ab cd", "på"])
    # "ab cd": a b Ġ c d (5 tokens, the bare space belongs to no word); "på": p Ã ¥ (3 tokens)
    assert (m["tokens"], m["words"], m["bytes"]) == (8, 3, 8)
    assert m["fertility"] == pytest.approx(8 / 3)
    assert m["split_share"] == 1.0
    assert m["bytes_per_token"] == 1.0


def test_metrics_of_a_word_tokenizer(whole_words) -> None:
    m = tokenizer_metrics(whole_words, ["hei på deg", "  hei\n\npå  "])
    assert m["fertility"] == 1.0 and m["split_share"] == 0.0 and m["words"] == 5


def test_compare_is_json_able_with_premium_vs_english(bytes_only, whole_words, tmp_path: Path) -> None:
    result = compare_tokenizers(
        {"base": bytes_only, "new": whole_words},
        {"nb": ["hei på deg"], "en": ["hi you"]},
        parallel={"en": ["hi you"], "nb": ["hei på deg"]},
    )
    json.dumps(result)
    assert result["languages"] == ["en", "nb"]
    assert result["tokenizers"]["base"]["nb"]["premium_vs_en"] == pytest.approx(11 / 6)
    assert result["tokenizers"]["new"]["nb"]["premium_vs_en"] == pytest.approx(3 / 2)
    table = render_table(result)
    lines = table.splitlines()
    assert lines[0].split()[:2] == ["lang", "base"] and "new/base" in lines[0]
    assert lines[2].startswith("en") and lines[3].startswith("nb")
    nb_ratio = 1.0 / (11 / 3)
    assert f"{nb_ratio:.2f}x" in lines[3]
    png = plot_fertility(result, tmp_path / "report" / "fertility.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_parallel_lists_must_align(bytes_only) -> None:
    with pytest.raises(ValueError, match="parallel"):
        compare_tokenizers({"t": bytes_only}, {"nb": ["a"]}, parallel={"en": ["a", "b"], "nb": ["a"]})
