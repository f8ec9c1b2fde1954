"""What grows with the corpus in the data stage is bounded: dedup digests spill to disk, near-dedup
states its limit."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from langadapt.data import cleaning
from langadapt.data.cleaning import Deduplicator, DigestSet, DocumentFilter, text_hash
from langadapt.errors import LangadaptError
from langadapt.recipe.data import CleaningConfig


def test_digest_set_spills_to_sqlite_past_its_limit_and_stays_exact(tmp_path: Path, caplog) -> None:
    digests = [text_hash(f"document {i}") for i in range(500)]
    store = DigestSet(tmp_path / "d.sqlite", limit=100)
    with caplog.at_level(logging.INFO, logger="langadapt.data"):
        for d in digests[:300]:
            store.add(d)
        store.add(digests[0])  # a repeat changes nothing
    assert "moving them to" in caplog.text and (tmp_path / "d.sqlite").exists()
    assert len(store) == 300
    assert all(d in store for d in digests[:300]) and not any(d in store for d in digests[300:])
    store.close()
    assert not (tmp_path / "d.sqlite").exists()


def test_near_dedup_refuses_past_its_stated_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("datasketch")
    monkeypatch.setattr(cleaning, "NEAR_DEDUP_MAX_DOCUMENTS", 3)
    config = CleaningConfig(near_dedup=True)
    filter_, dedup = DocumentFilter(config), Deduplicator(config, tmp_path)
    texts = [" ".join(f"w{i}x{j}" for j in range(30)) for i in range(5)]  # no two alike
    for text in texts[:3]:
        assert not dedup.near_duplicate(text_hash(text), filter_.signature(text))
    assert dedup.near_duplicate(text_hash(texts[0] + " "), filter_.signature(texts[0]))  # still answers
    with pytest.raises(LangadaptError, match="more than 3 documents.*datatrove"):
        dedup.near_duplicate(text_hash(texts[3]), filter_.signature(texts[3]))
