"""A real build of nb.debian-handbook from the Debian package (needs apt-get and the network)."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from langadapt.corpora.debian_docs import SOURCES, build_debian_corpus
from langadapt.errors import LangadaptError
from tests.helpers.langvote import vote_language

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "corpora"  # optional: only compared with when present
# nb.debian-handbook train+valid in the reference pack (../shared/corpora/stats.json).
REFERENCE = {"docs": 126, "chars": 709_659}


@pytest.mark.slow
def test_real_nb_handbook_build_matches_the_reference_pack(tmp_path: Path) -> None:
    if shutil.which("apt-get") is None:
        pytest.skip("apt-get not available")
    package, locale = SOURCES["nb.debian-handbook"]
    out = tmp_path / "nb.debian-handbook.jsonl.gz"
    try:
        # The repo's download cache (git-ignored), shared with corpora/build.py: one download ever.
        build_debian_corpus(package, locale, out, REPO / "corpora" / "cache")
    except LangadaptError as exc:
        pytest.skip(f"could not fetch {package}: {exc}")
    with gzip.open(out, "rt", encoding="utf-8") as f:
        docs = [json.loads(line) for line in f]
    chars = sum(len(d["text"]) for d in docs)
    # Same pages; our extractor keeps inline code the reference dropped, so a little more text.
    assert abs(len(docs) - REFERENCE["docs"]) <= 0.1 * REFERENCE["docs"]
    assert 0.8 * REFERENCE["chars"] <= chars <= 1.3 * REFERENCE["chars"]
    assert len({d["id"] for d in docs}) == len(docs)
    assert {d["lang"] for d in docs} == {"nb"} and {d["source"] for d in docs} == {"debian-handbook"}
    paragraphs = [p for d in docs for p in d["text"].split("\n\n")]
    assert sum(vote_language(p) == "en" for p in paragraphs) == 0  # English fallbacks are gone
    assert sum(vote_language(p) == "nb" for p in paragraphs) > 0.5 * len(paragraphs)
    assert "GPL-2.0+ or CC-BY-SA-3.0" in Path(f"{out}.LICENSE.txt").read_text()
    if SHARED.is_dir():  # same pages, same ids as the reference pack
        theirs = set()
        for split in ("train", "valid"):
            with gzip.open(SHARED / f"nb.debian-handbook.{split}.jsonl.gz", "rt", encoding="utf-8") as f:
                theirs |= {json.loads(line)["id"] for line in f}
        assert len({d["id"] for d in docs} & theirs) >= 0.95 * len(theirs)
