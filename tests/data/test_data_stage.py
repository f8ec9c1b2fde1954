"""The data stage: cleaning counts, a held-out split that is stable and never leaks, outputs."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from langadapt.data.documents import read_documents
from langadapt.data.stage import run
from langadapt.errors import LangadaptError
from langadapt.recipe.data import DataConfig, DataSlice
from langadapt.run.context import StageContext

WORDS = ["og", "i", "det", "som", "er", "på", "en", "til", "av", "for", "med", "har", "ikke", "den", "jeg", "de", "at", "seg", "så", "kan"]


def _corpus(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 60))) + f" dokument {i}." for i in range(n)]


def _write_jsonl(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts))
    return path


def _run(tmp_path: Path, sources: list[dict], name: str = "run", **extra: object) -> tuple[dict, Path]:
    config = DataConfig.model_validate({"sources": sources, **extra})
    ctx = StageContext(run_dir=tmp_path / name, stage="data", seed=0)
    ctx.out.mkdir(parents=True)
    return run(DataSlice(config), ctx), ctx.out


def _texts(path: Path) -> list[str]:
    return [d["text"] for d in read_documents(path)]


def test_cleaning_counts_and_output_format(tmp_path: Path) -> None:
    texts = _corpus(200) + ["kort", "  Bla\u030ab\u00e6r og mer tekst her  ", "Blåbær og mer tekst her", "x" * 5000]
    src = _write_jsonl(tmp_path / "nb.jsonl", texts + texts[:10])
    summary, out = _run(tmp_path, [{"name": "nb", "path": str(src), "lang": "nb"}],
                        cleaning={"min_chars": 10, "max_chars": 4000}, valid_fraction=0.1)
    stats = summary["sources"]["nb"]
    # NFC makes the decomposed "å" equal to the composed one, so it is an exact duplicate.
    assert stats["dropped"] == {"duplicate": 11, "too_long": 1, "too_short": 1}
    assert stats["docs_read"] == 214
    assert stats["train_docs"] + stats["valid_docs"] == 201
    assert 5 <= stats["valid_docs"] <= 40
    assert json.loads((out / "stats.json").read_text()) == {k: v for k, v in summary.items() if k != "run"}
    doc = next(read_documents(out / "train" / "nb.jsonl.gz"))
    assert set(doc) == {"id", "text", "lang", "source", "role"}
    assert doc["lang"] == "nb" and doc["source"] == "nb" and doc["role"] == "target"
    assert stats["train_chars"] == sum(map(len, _texts(out / "train" / "nb.jsonl.gz")))


def test_held_out_split_is_stable_across_runs_and_input_order(tmp_path: Path) -> None:
    texts = _corpus(300)
    shuffled = texts[:]
    random.Random(1).shuffle(shuffled)
    _, out_a = _run(tmp_path, [{"name": "nb", "path": str(_write_jsonl(tmp_path / "a.jsonl", texts)), "lang": "nb"}], "a")
    _, out_b = _run(tmp_path, [{"name": "nb", "path": str(_write_jsonl(tmp_path / "b.jsonl", shuffled)), "lang": "nb"}], "b")
    valid_a, valid_b = _texts(out_a / "valid" / "nb.jsonl.gz"), _texts(out_b / "valid" / "nb.jsonl.gz")
    assert valid_a and set(valid_a) == set(valid_b)
    train_a = set(_texts(out_a / "train" / "nb.jsonl.gz"))
    assert not train_a & set(valid_a)
    assert train_a | set(valid_a) == set(texts)


def test_max_valid_docs_keeps_lowest_hashes_and_trains_the_rest(tmp_path: Path) -> None:
    texts = _corpus(400)
    src = str(_write_jsonl(tmp_path / "a.jsonl", texts))
    _, full = _run(tmp_path, [{"name": "nb", "path": src, "lang": "nb"}], "full", valid_fraction=0.2)
    summary, capped = _run(tmp_path, [{"name": "nb", "path": src, "lang": "nb"}], "capped",
                           valid_fraction=0.2, max_valid_docs=5)
    assert summary["sources"]["nb"]["valid_docs"] == 5
    assert set(_texts(capped / "valid" / "nb.jsonl.gz")) <= set(_texts(full / "valid" / "nb.jsonl.gz"))
    assert summary["sources"]["nb"]["train_docs"] == 395


def test_explicit_valid_path_and_copies_of_it_are_dropped_from_train(tmp_path: Path) -> None:
    texts = _corpus(50)
    train = _write_jsonl(tmp_path / "train.jsonl", texts)
    valid = _write_jsonl(tmp_path / "valid.jsonl", texts[:3] + ["bare i valid " * 5])
    summary, out = _run(tmp_path, [{"name": "nb", "path": str(train), "valid_path": str(valid), "lang": "nb"}])
    assert _texts(out / "valid" / "nb.jsonl.gz") == texts[:3] + [("bare i valid " * 5).strip()]
    assert summary["sources"]["nb"]["dropped"] == {"duplicate": 3}
    assert set(_texts(out / "train" / "nb.jsonl.gz")) == set(texts[3:])


def test_near_duplicates_and_language_filter(tmp_path: Path) -> None:
    pytest.importorskip("datasketch")
    pytest.importorskip("py3langid")
    base = _corpus(40)
    near = [t.replace(" og ", " OG ", 1) + " ekstra" for t in base[:5]]
    english = ["This is an English paragraph about the weather and the people who talk about it all day."] * 1
    src = _write_jsonl(tmp_path / "nb.jsonl", base + near + english)
    cleaning = {"near_dedup": True, "near_dedup_threshold": 0.7, "lang_filter": True, "lang_filter_min_chars": 50}
    summary, out = _run(tmp_path, [{"name": "nb", "path": str(src), "lang": "nb"}], cleaning=cleaning)
    dropped = summary["sources"]["nb"]["dropped"]
    assert dropped["near_duplicate"] == 5
    assert dropped["wrong_language"] >= 1  # word salad of stopwords may also look Danish
    kept = _texts(out / "train" / "nb.jsonl.gz") + _texts(out / "valid" / "nb.jsonl.gz")
    assert english[0] not in kept and not set(near) & set(kept)


def test_language_filter_accepts_real_bokmal_and_nynorsk(tmp_path: Path, shared_dir: Path) -> None:
    pytest.importorskip("py3langid")
    sources = [
        {"name": "nb", "path": str(shared_dir / "corpora/nb.debian-handbook.valid.jsonl.gz"), "lang": "nb"},
        {"name": "nn", "path": str(shared_dir / "corpora/nn.gimp-help.valid.jsonl.gz"), "lang": "nn", "max_docs": 15},
    ]
    summary, _ = _run(tmp_path, sources, cleaning={"lang_filter": True})
    for name in ("nb", "nn"):
        stats = summary["sources"][name]
        assert stats.get("dropped", {}).get("wrong_language", 0) <= 0.2 * stats["docs_read"]


def test_empty_corpus_after_cleaning_names_the_source(tmp_path: Path) -> None:
    src = _write_jsonl(tmp_path / "tiny.jsonl", ["a", "b", ""])
    with pytest.raises(LangadaptError, match=r"^source tiny: no training documents left after cleaning \(read 3, "
                                            r"dropped: empty 1, too_short 2\)"):
        _run(tmp_path, [{"name": "tiny", "path": str(src), "lang": "nb"}], cleaning={"min_chars": 5})


def test_typo_in_a_later_source_fails_before_any_work(tmp_path: Path) -> None:
    good = _write_jsonl(tmp_path / "good.jsonl", _corpus(5))
    sources = [{"name": "good", "path": str(good), "lang": "nb"}, {"name": "bad", "path": "nope/*.jsonl", "lang": "nb"}]
    with pytest.raises(LangadaptError, match="source bad: path 'nope/\\*.jsonl' matches no file"):
        _run(tmp_path, sources)
    assert not (tmp_path / "run" / "data" / "train").exists()


def test_a_source_failing_half_way_leaves_no_output_file(tmp_path: Path) -> None:
    src = tmp_path / "bad.jsonl"
    src.write_bytes(("".join(json.dumps({"text": t}) + "\n" for t in _corpus(50))).encode() + b'{"text": "\xff"}\n')
    with pytest.raises(LangadaptError, match="invalid UTF-8 at byte"):
        _run(tmp_path, [{"name": "bad", "path": str(src), "lang": "nb"}])
    assert list((tmp_path / "run" / "data").rglob("*.jsonl.gz*")) == []


def test_max_docs_bounds_the_held_out_file_and_the_train_files_each(tmp_path: Path) -> None:
    """A source with valid_path reads at most max_docs from each side (the frontier's sv source,
    max_docs: 2, got 0 training documents when the count was shared)."""
    train = _write_jsonl(tmp_path / "sv.jsonl", _corpus(10, seed=3))
    valid = _write_jsonl(tmp_path / "sv-valid.jsonl", _corpus(10, seed=4))
    summary, out = _run(tmp_path, [{"name": "nb", "path": str(_write_jsonl(tmp_path / "nb.jsonl", _corpus(30))), "lang": "nb"},
                                   {"name": "sv", "path": str(train), "valid_path": str(valid), "lang": "sv",
                                    "role": "replay", "max_docs": 2}])
    stats = summary["sources"]["sv"]
    assert (stats["train_docs"], stats["valid_docs"], stats["docs_read"]) == (2, 2, 4)
    assert _texts(out / "train" / "sv.jsonl.gz") == _corpus(10, seed=3)[:2]
