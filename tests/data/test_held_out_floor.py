"""data.min_valid_documents: a target source a tiny valid_fraction would leave without held-out
documents keeps the ones of the lowest split keys (whole key groups), deterministically, without
overlap, and the split is untouched when the hash already holds out enough (issue 32 item 5)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from langadapt.data.cleaning import hash_fraction, text_hash
from langadapt.data.documents import read_documents
from langadapt.data.held_out_floor import FloorCandidates
from langadapt.data.stage import run
from langadapt.recipe.data import DataConfig, DataSlice
from langadapt.recipe.schema import Recipe
from langadapt.run.context import StageContext
from langadapt.run.fingerprint import section_hash

WORDS = ["og", "i", "det", "som", "er", "på", "en", "til", "av", "for", "med", "har", "ikke", "den", "jeg"]


def _corpus(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 40))) + f" dokument {i}." for i in range(n)]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return path


def _source(tmp_path: Path, name: str, texts: list[str], role: str = "target", ids: list[str] | None = None) -> dict:
    rows = [{"text": t, **({"id": ids[i]} if ids else {})} for i, t in enumerate(texts)]
    return {"name": name, "path": str(_write(tmp_path / f"{name}-{len(texts)}.jsonl", rows)), "lang": "nb", "role": role}


def _run(tmp_path: Path, run_name: str, sources: list[dict], **extra: object) -> tuple[dict, Path]:
    config = DataConfig.model_validate({"sources": sources, **extra})
    ctx = StageContext(run_dir=tmp_path / run_name, stage="data", seed=0)
    ctx.out.mkdir(parents=True)
    return run(DataSlice(config), ctx), ctx.out


def _split(out: Path, source: str) -> tuple[list[str], list[str]]:
    return tuple([d["text"] for d in read_documents(out / side / f"{source}.jsonl.gz")]  # type: ignore[return-value]
                 for side in ("train", "valid"))


def _lowest(texts: list[str], n: int) -> set[str]:
    return set(sorted(texts, key=lambda t: text_hash(t))[:n])


def test_the_floor_holds_out_the_lowest_hashes_of_a_target_source(tmp_path: Path) -> None:
    texts = _corpus(30)
    assert not any(hash_fraction(text_hash(t)) < 0.001 for t in texts)  # the hash alone holds out nothing
    summary, out = _run(tmp_path, "one", [_source(tmp_path, "nb", texts)], valid_fraction=0.001)
    train, valid = _split(out, "nb")
    assert set(valid) == _lowest(texts, 1)  # the default floor: one document
    assert sorted(train + valid) == sorted(texts) and not set(train) & set(valid)
    assert train == [t for t in texts if t not in valid]  # train keeps its order
    stats = summary["sources"]["nb"]
    assert (stats["train_docs"], stats["valid_docs"], stats["valid_floor_docs"]) == (29, 1, 1)
    assert stats["train_chars"] == sum(map(len, train)) and stats["valid_chars"] == sum(map(len, valid))

    _, out = _run(tmp_path, "three", [_source(tmp_path, "nb", texts)], valid_fraction=0.001, min_valid_documents=3)
    assert set(_split(out, "nb")[1]) == _lowest(texts, 3)


def test_the_floor_tops_up_what_the_hash_held_out(tmp_path: Path) -> None:
    texts = _corpus(40, seed=4)
    by_hash = {t for t in texts if hash_fraction(text_hash(t)) < 0.05}
    assert 0 < len(by_hash) < 6
    _, out = _run(tmp_path, "r", [_source(tmp_path, "nb", texts)], valid_fraction=0.05, min_valid_documents=6)
    train, valid = _split(out, "nb")
    assert len(valid) == 6 and by_hash < set(valid) and set(valid) == _lowest(texts, 6)
    assert len(train) == 34 and not set(train) & set(valid)


def test_the_split_is_deterministic_whatever_the_input_order(tmp_path: Path) -> None:
    texts = _corpus(30)
    shuffled = texts[:]
    random.Random(7).shuffle(shuffled)
    splits = []
    for name, corpus in (("a", texts), ("b", texts), ("c", shuffled)):
        _, out = _run(tmp_path, name, [_source(tmp_path, f"nb{name}", corpus)],
                      valid_fraction=0.001, min_valid_documents=2)
        train, valid = _split(out, f"nb{name}")
        splits.append((set(train), set(valid)))
    assert splits[0] == splits[1] == splits[2]


def test_untouched_when_the_hash_already_holds_out_enough(tmp_path: Path) -> None:
    texts = _corpus(100, seed=2)
    sources = [_source(tmp_path, "nb", texts)]
    floored, out = _run(tmp_path, "floor", sources, valid_fraction=0.1, min_valid_documents=3)
    plain, reference = _run(tmp_path, "plain", sources, valid_fraction=0.1, min_valid_documents=0)
    assert _split(out, "nb") == _split(reference, "nb")  # same documents, same order
    assert floored["sources"] == plain["sources"] and "valid_floor_docs" not in floored["sources"]["nb"]
    assert floored["sources"]["nb"]["valid_docs"] >= 3


def test_only_target_sources_are_floored_and_zero_turns_it_off(tmp_path: Path, caplog) -> None:
    sources = [_source(tmp_path, "nb", _corpus(30)), _source(tmp_path, "en", _corpus(30, seed=1), role="replay")]
    summary, _ = _run(tmp_path, "a", sources, valid_fraction=0.001)
    assert summary["sources"]["nb"]["valid_docs"] == 1 and summary["sources"]["en"]["valid_docs"] == 0
    with caplog.at_level("WARNING", logger="langadapt"):
        off, _ = _run(tmp_path, "b", sources, valid_fraction=0.001, min_valid_documents=0)
    assert off["sources"]["nb"]["valid_docs"] == 0
    assert ("target source nb (nb) holds out 0 of its 30 document(s), data.valid_fraction: 0.001 picks none and "
            "data.min_valid_documents is 0") in caplog.text
    assert "source en" not in caplog.text
    nothing, _ = _run(tmp_path, "c", sources, valid_fraction=0)  # valid_fraction 0: nothing held out, on purpose
    assert nothing["sources"]["nb"]["valid_docs"] == 0


def test_a_one_document_source_trains_and_is_said(tmp_path: Path, caplog) -> None:
    with caplog.at_level("WARNING", logger="langadapt"):
        summary, out = _run(tmp_path, "r", [_source(tmp_path, "nb", _corpus(1))], valid_fraction=0.001)
    assert (summary["sources"]["nb"]["train_docs"], summary["sources"]["nb"]["valid_docs"]) == (1, 0)
    assert _split(out, "nb") == (_corpus(1), [])
    assert "target source nb (nb) holds out 0 of its 1 document(s), below data.min_valid_documents (1)" in caplog.text
    two, _ = _run(tmp_path, "two", [_source(tmp_path, "nb", _corpus(2))], valid_fraction=0.001)
    assert (two["sources"]["nb"]["train_docs"], two["sources"]["nb"]["valid_docs"]) == (1, 1)


def test_by_id_whole_pages_move_and_languages_move_the_same_pages(tmp_path: Path) -> None:
    pages = [f"p{i}.html" for i in range(20)]
    lowest = min(pages, key=lambda p: text_hash(p))
    # nb has the lowest page twice (two sections of one page): both move, as the hash would move them
    nb_ids = [f"doc/nb-NO/{p}" for p in pages] + [f"doc/nb-NO/{lowest}"]
    en_ids = [f"doc/en-US/{p}" for p in pages]
    nb, en = _corpus(21, seed=5), _corpus(20, seed=6)
    summary, out = _run(tmp_path, "r", [_source(tmp_path, "nb", nb, ids=nb_ids), _source(tmp_path, "en", en, ids=en_ids)],
                        valid_fraction=0.001, split_by="id")
    held = {lang: {ids[texts.index(t)].rsplit("/", 1)[1] for t in _split(out, lang)[1]}
            for lang, texts, ids in (("nb", nb, nb_ids), ("en", en, en_ids))}
    assert held["nb"] == held["en"] == {lowest}
    assert summary["sources"]["nb"]["valid_docs"] == 2 and summary["sources"]["en"]["valid_docs"] == 1


def test_floor_candidates_keep_the_lowest_groups_and_never_empty_train() -> None:
    candidates = FloorCandidates(limit=2)
    for position, key in enumerate([b"d", b"b", b"c", b"b", b"a", b"e"]):
        candidates.offer(key, position)
    assert candidates.choose(needed=1, train_docs=6) == {4}  # key a
    assert candidates.choose(needed=2, train_docs=6) == {4, 1, 3}  # a, then the whole b group
    assert candidates.choose(needed=2, train_docs=3) == {4}  # a and b together would empty train


def test_the_setting_is_checked_and_its_default_keeps_every_fingerprint() -> None:
    sources = [{"name": "nb", "path": "x.jsonl", "lang": "nb"}]
    assert "min_valid_documents" not in DataConfig.model_validate({"sources": sources}).model_dump(mode="json")
    with pytest.raises(ValueError, match="min_valid_documents .5. is above max_valid_docs .3."):
        DataConfig.model_validate({"sources": sources, "min_valid_documents": 5, "max_valid_docs": 3})

    def data_hash(**data: object) -> str:
        recipe = Recipe.model_validate({"name": "r", "base_model": {"path": "b"}, "tokenizer": {"vocab_size": 300},
                                        "data": {"sources": sources, **data}})
        return section_hash(recipe, ["data"])

    assert data_hash() == data_hash(min_valid_documents=1)
    assert data_hash() != data_hash(min_valid_documents=2)
