"""An extension's card counts only the tokens it learned (issue 38): 7,583 of 8,192 new tokens on a
32,000-token base was shown as "99% of the asked size", the kept base ids counted as learned."""

from __future__ import annotations

import json
from pathlib import Path

from langadapt.export.card import Exported, origin_text, vocabulary_text
from langadapt.export.provenance import RunFacts
from langadapt.run.layout import RunLayout
from langadapt.tokenizer.summary import vocabulary_shortfall

EXTENDED = {"kind": "extend", "vocab_size": 39_583, "vocab_size_requested": 40_192, "base_vocab_size": 32_000}


def test_an_extension_short_of_its_size_is_counted_by_its_new_tokens() -> None:
    text = vocabulary_shortfall(EXTENDED)
    assert text is not None
    assert "learned 7,583 of the 8,192 new tokens asked for (93%" in text
    assert "99%" not in text and "39,583 tokens" not in text


def test_an_extension_without_its_base_size_gets_no_share() -> None:
    """A summary written before base_vocab_size existed: no percentage rather than a wrong one."""
    text = vocabulary_shortfall({key: value for key, value in EXTENDED.items() if key != "base_vocab_size"})
    assert text is not None and "%" not in text and "fewer than the 40,192 asked for" in text


def test_a_new_tokenizer_is_still_counted_whole() -> None:
    """A replacement learned every one of its tokens, so its share stays reached / asked."""
    text = vocabulary_shortfall({"kind": "inherit", "vocab_size": 13_020, "vocab_size_requested": 32_768,
                                 "base_vocab_size": 32_000})
    assert text is not None and "13,020 tokens, 40% of the 32,768 asked for" in text


def test_the_card_says_how_many_tokens_the_extension_added() -> None:
    text = vocabulary_text(EXTENDED, {"method": "mean"})
    assert "7,583 new tokens learned on the target language appended to the base's 32,000" in text


def test_the_cards_origin_note_counts_new_tokens(tmp_path: Path) -> None:
    layout = RunLayout(tmp_path / "run")
    for stage, summary in {"tokenizer": EXTENDED, "embeddings": {"method": "mean"}}.items():
        layout.manifest(stage).parent.mkdir(parents=True, exist_ok=True)
        layout.manifest(stage).write_text(json.dumps({"stage": stage, "summary": summary}))
    facts = RunFacts(init="warm", base_hub_id=None, base_label="base", sources=(), target_languages=())
    text = origin_text(layout, facts, Exported(name="adapted", training_stages=(), verification={}))
    assert "Note: the extension learned 7,583 of the 8,192 new tokens asked for (93%" in text
