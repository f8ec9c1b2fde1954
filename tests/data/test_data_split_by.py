"""data.split_by: `id` holds a page out with its translations; `text` (the default) is the split as
it always was; documents without an id fall back to their text; the setting reaches the fingerprint
only when it is set."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from langadapt.data.cleaning import hash_fraction, text_hash
from langadapt.data.documents import read_documents
from langadapt.data.preparation import split_digest
from langadapt.data.records import Document
from langadapt.data.sources import iter_documents
from langadapt.data.stage import run
from langadapt.errors import LangadaptError
from langadapt.recipe.data import DataConfig, DataSlice, SourceConfig
from langadapt.run.context import StageContext

NB_WORDS = ["og", "i", "det", "som", "er", "på", "en", "til", "av", "for", "med", "har", "ikke", "pakken"]
EN_WORDS = ["and", "in", "the", "that", "is", "on", "a", "to", "of", "for", "with", "has", "not", "package"]
PAGES = 300


def _pages(words: list[str], seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(20, 40))) + f" side {i}." for i in range(PAGES)]


def _write(path: Path, texts: list[str], locale: str | None) -> Path:
    """JSON Lines with ids like the handbook's (`debian-handbook/html/<locale>/pN.html`); none when
    `locale` is None."""
    rows = ({"text": t, **({"id": f"debian-handbook/html/{locale}/p{i}.html"} if locale else {})}
            for i, t in enumerate(texts))
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return path


def _run(tmp_path: Path, name: str, sources: list[dict], **extra: object) -> tuple[dict, Path]:
    config = DataConfig.model_validate({"sources": sources, "valid_fraction": 0.1, **extra})
    ctx = StageContext(run_dir=tmp_path / name, stage="data", seed=0)
    ctx.out.mkdir(parents=True)
    return run(DataSlice(config), ctx), ctx.out


def _held_out(out: Path, source: str) -> set[str]:
    return {d["text"] for d in read_documents(out / "valid" / f"{source}.jsonl.gz")}


def _bilingual(tmp_path: Path, name: str, nb_locale: str | None = "nb-NO", **extra: object) -> tuple[dict, dict]:
    """Run the data stage on nb and en versions of the same 300 pages; {lang: held-out page numbers}."""
    nb, en = _pages(NB_WORDS, 1), _pages(EN_WORDS, 2)
    summary, out = _run(tmp_path, name, [
        {"name": "nb", "path": str(_write(tmp_path / f"{name}.nb.jsonl", nb, nb_locale)), "lang": "nb"},
        {"name": "en", "path": str(_write(tmp_path / f"{name}.en.jsonl", en, "en-US")), "lang": "en"},
    ], **extra)
    held = {lang: {texts.index(t) for t in _held_out(out, lang)} for lang, texts in (("nb", nb), ("en", en))}
    return summary, held


def test_by_id_a_page_and_its_translation_land_on_the_same_side(tmp_path: Path) -> None:
    summary, held = _bilingual(tmp_path, "id", split_by="id")
    assert held["nb"] == held["en"]
    assert 10 < len(held["nb"]) < 60  # about 10% of 300
    # The key is the id's file name alone: the same page hashes the same under any folder.
    assert held["nb"] == {i for i in range(PAGES) if hash_fraction(text_hash(f"p{i}.html")) < 0.1}
    assert summary["split_by"] == "id"
    assert summary["sources"]["nb"]["split_by_text_fallback"] == 0


def test_by_text_the_split_is_unchanged_and_ignores_ids(tmp_path: Path) -> None:
    summary, held = _bilingual(tmp_path, "text")
    nb = _pages(NB_WORDS, 1)
    assert held["nb"] == {i for i, t in enumerate(nb) if hash_fraction(text_hash(t)) < 0.1}
    assert held["nb"] != held["en"]  # independent per language: why `id` exists
    assert "split_by_text_fallback" not in summary["sources"]["nb"]


def test_documents_without_an_id_fall_back_to_their_text_and_are_counted(tmp_path: Path, caplog) -> None:
    with caplog.at_level("WARNING", logger="langadapt"):
        summary, held = _bilingual(tmp_path, "fallback", nb_locale=None, split_by="id")
    assert f"source nb: {PAGES} of its {PAGES} kept documents have no 'id' field" in caplog.text
    assert "source en:" not in caplog.text
    _, by_text = _bilingual(tmp_path, "reference")
    assert held["nb"] == by_text["nb"]  # nb has no ids: split by text
    assert held["en"] != by_text["en"]  # en has them: split by page
    assert summary["sources"]["nb"]["split_by_text_fallback"] == PAGES
    assert summary["sources"]["en"]["split_by_text_fallback"] == 0
    assert summary["sources"]["nb"]["dropped"] == {}


def test_a_txt_source_falls_back_to_the_text_hash(tmp_path: Path) -> None:
    texts = _pages(NB_WORDS, 3)
    path = tmp_path / "nb.txt"
    path.write_text("\n\n".join(texts) + "\n")
    summary, out = _run(tmp_path, "txt", [{"name": "nb", "path": str(path), "lang": "nb"}], split_by="id")
    assert _held_out(out, "nb") == {t for t in texts if hash_fraction(text_hash(t)) < 0.1}
    assert summary["sources"]["nb"]["split_by_text_fallback"] == PAGES


def test_max_valid_docs_caps_each_language_to_the_same_pages(tmp_path: Path) -> None:
    _, full = _bilingual(tmp_path, "full", split_by="id")
    summary, capped = _bilingual(tmp_path, "capped", split_by="id", max_valid_docs=5)
    assert summary["sources"]["nb"]["valid_docs"] == summary["sources"]["en"]["valid_docs"] == 5
    assert capped["nb"] == capped["en"] and capped["nb"] < full["nb"]


def test_split_digest_keys() -> None:
    digest = text_hash("some text")
    assert split_digest(digest, "pkg/html/nb-NO/a.html", "id") == split_digest(digest, "other/en-US/a.html", "id")
    assert split_digest(digest, "pkg/html/nb-NO/a.html", "id") != split_digest(digest, "pkg/html/nb-NO/b.html", "id")
    assert split_digest(digest, None, "id") == digest == split_digest(digest, "pkg/a.html", "text")


def test_the_default_leaves_the_dumped_recipe_and_so_every_fingerprint_as_it_was() -> None:
    sources = [{"name": "nb", "path": "x.jsonl", "lang": "nb"}]
    assert "split_by" not in DataConfig.model_validate({"sources": sources}).model_dump(mode="json")
    by_id = DataConfig.model_validate({"sources": sources, "split_by": "id"})
    assert by_id.model_dump(mode="json")["split_by"] == "id"
    assert DataConfig.model_validate(by_id.model_dump(mode="json")).split_by == "id"


def test_the_reader_carries_ids_from_json_and_parquet_rows(tmp_path: Path) -> None:
    rows = [{"text": "en", "id": "a/p1.html"}, {"text": "to"}, {"text": "tre", "id": 7}]
    jsonl = tmp_path / "x.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = pa.table({"text": ["en", "to"], "id": ["a/p1.html", None]})
    pq.write_table(table, tmp_path / "x.parquet")
    source = SourceConfig.model_validate({"name": "nb", "path": str(jsonl), "lang": "nb"})
    assert list(iter_documents(source, [jsonl], "error", Counter())) == [
        Document("en", "a/p1.html"), Document("to", None), Document("tre", "7")]
    assert list(iter_documents(source, [tmp_path / "x.parquet"], "error", Counter())) == [
        Document("en", "a/p1.html"), Document("to", None)]


def _same_id(tmp_path: Path, name: str, texts: list[str]) -> Path:
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps({"text": t, "id": f"site/{i % 3}/page.html"}) + "\n"
                            for i, t in enumerate(texts)))
    return path


def test_every_document_sharing_one_id_is_refused_like_valid_fraction_zero(tmp_path: Path) -> None:
    """One id name on every document is one key group: all held out or none. Refused with a line
    naming the source and its file, as `valid_fraction: 0` (the same outcome) is refused."""
    path = _same_id(tmp_path, "same", _pages(NB_WORDS, 4)[:20])
    # Whichever side the one key hashes to (`page.html` with 0.1 and 0.99), the refusal is the same line.
    for fraction in (0.1, 0.99):
        config = DataConfig.model_validate({"sources": [{"name": "nb", "path": str(path), "lang": "nb"}],
                                            "valid_fraction": fraction, "split_by": "id"})
        ctx = StageContext(run_dir=tmp_path / f"run{fraction}", stage="data", seed=0)
        ctx.out.mkdir(parents=True)
        try:
            run(DataSlice(config), ctx)
        except LangadaptError as error:
            message = str(error)
        else:
            raise AssertionError("a source whose documents all share one id was accepted")
        assert message.startswith(f"source nb ({path}): data.split_by: id, but all 20 of its documents")
        assert "so no document can be held out" in message and "\n" not in message
        assert not (ctx.out / "train" / "nb.jsonl.gz").exists()


def test_one_shared_id_next_to_documents_without_ids_is_a_split(tmp_path: Path) -> None:
    """Documents without an id split by their text, so they are keys of their own: not refused."""
    texts = _pages(NB_WORDS, 5)
    path = _same_id(tmp_path, "mixed", texts[:5])
    with path.open("a") as out:
        out.writelines(json.dumps({"text": t}) + "\n" for t in texts[5:])
    summary, _ = _run(tmp_path, "mixed", [{"name": "nb", "path": str(path), "lang": "nb"}], split_by="id")
    assert summary["sources"]["nb"]["valid_docs"] >= 1
    assert summary["sources"]["nb"]["split_by_text_fallback"] == PAGES - 5
