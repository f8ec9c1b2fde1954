"""Issue 37: the tokenizer stage at corpus scale. The default sample bound leaves a demo-sized
corpus's tokenizer byte-identical, counting on N workers gives exactly the counts (and tokenizer)
of one process, held-out metrics read a bounded sample, the summary times each part."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest
from tokenizers import Regex, Tokenizer, pre_tokenizers

from langadapt.data.documents import read_documents, write_documents
from langadapt.errors import LangadaptError
from langadapt.recipe.tokenizer import DEFAULT_MAX_TRAINING_CHARS, TokenizerConfig, TokenizerSlice
from langadapt.run.context import StageContext
from langadapt.tokenizer import counting
from langadapt.tokenizer.counting import ChunkCounter
from langadapt.tokenizer.loading import load_tokenizer
from langadapt.tokenizer.metrics import held_out_sample
from langadapt.tokenizer.sample import sample_bound, sample_documents
from langadapt.tokenizer.train import train_tokenizer


def _demo_pairs(shared_dir: Path) -> list[tuple[str, str]]:
    """The demo's training languages from the shared packs (nb + en debian-handbook, ~1.5 MB)."""
    pairs = []
    for lang in ("nb", "en"):
        with gzip.open(shared_dir / "corpora" / f"{lang}.debian-handbook.train.jsonl.gz", "rt") as f:
            pairs += [(lang, json.loads(line)["text"]) for line in f]
    return pairs


def _json(tokenizer) -> str:
    return tokenizer.backend_tokenizer.to_str()


def test_bound_setting_values() -> None:
    assert sample_bound(None) == DEFAULT_MAX_TRAINING_CHARS
    assert sample_bound("all") is None and sample_bound(1234) == 1234
    assert TokenizerConfig().model_dump(mode="json")["max_training_chars"] is None  # old runs keep their prints
    with pytest.raises(ValueError, match="max_training_chars=0"):
        TokenizerConfig(max_training_chars=0)
    with pytest.raises(ValueError):
        TokenizerConfig(max_training_chars="everything")


def test_bad_bound_in_a_recipe_is_one_located_line(tmp_path: Path) -> None:
    from langadapt.recipe import load_recipe

    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: r\ninit: scratch\ndata: {sources: [{name: a, path: a.jsonl.gz, lang: nb, role: target}]}\n"
                      "tokenizer: {max_training_chars: everything}\n")
    with pytest.raises(LangadaptError) as info:
        load_recipe(recipe)
    assert "tokenizer.max_training_chars" in str(info.value) and "\n" not in str(info.value).strip()


def test_a_corpus_below_the_bound_is_streamed_whole_in_order() -> None:
    texts = [("nb", f"dokument {i} " * (i + 1)) for i in range(50)] + [("en", "document")] * 3
    weights = {"nb": 0.7, "en": 0.3}
    bounded = list(sample_documents(texts, weights, 10**9, seed=3))
    assert bounded == [t for t in texts if t[0] == "en"] + [t for t in texts if t[0] == "nb"]
    assert list(sample_documents(texts, None, 10**9, seed=3)) == list(sample_documents(texts, None, None, 3))


def test_demo_sized_text_gives_the_same_tokenizer_with_and_without_the_default_bound(
        shared_dir: Path, tiny_en_llama: Path) -> None:
    pairs = _demo_pairs(shared_dir)
    assert sum(len(t) for _, t in pairs) < DEFAULT_MAX_TRAINING_CHARS
    base = load_tokenizer(str(tiny_en_llama), what="base")
    made = {bound: _json(train_tokenizer(TokenizerConfig(vocab_size=8192, language_weights={"nb": 0.7, "en": 0.3},
                                                         max_training_chars=bound), iter(pairs), base, seed=1234))
            for bound in (None, "all")}
    assert made[None] == made["all"]


LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of 20k characters and a pool from 40k on, so that a test-sized text uses workers."""
    monkeypatch.setattr(counting, "BATCH_CHARS", 20_000)
    monkeypatch.setattr(counting, "IN_PROCESS_CHARS", 40_000)


def _counted(pre: object, texts: list[tuple[str, str]], workers: int | None, by_add: bool = False) -> ChunkCounter:
    counter = ChunkCounter(Tokenizer.from_str(_NORMALIZER_JSON).normalizer, pre)
    if by_add:
        for lang, text in texts:
            counter.add(lang, text)
    else:
        counter.add_all(texts, workers)
    return counter


_NORMALIZER_JSON = json.dumps({"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
                               "normalizer": {"type": "NFC"}, "pre_tokenizer": None, "post_processor": None,
                               "decoder": None, "model": {"type": "BPE", "vocab": {}, "merges": []}})


@pytest.mark.slow
@pytest.mark.parametrize("pre_name", ["llama3", "across_spaces"])
def test_counting_on_workers_equals_one_process(small_batches: None, shared_texts, pre_name: str) -> None:
    pre = (pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
           if pre_name == "llama3" else pre_tokenizers.Split(Regex(r"\w+ \w+|\S"), behavior="isolated"))
    texts = [("nb", t) for t in shared_texts("nb.debian-handbook.train", limit=60)]
    texts += [("en", t) for t in shared_texts("en.debian-handbook.train", limit=30)]
    assert sum(len(t) for _, t in texts) > 4 * counting.IN_PROCESS_CHARS
    sequential = _counted(pre, texts, None, by_add=True)
    for workers in (1, 2):
        parallel = _counted(pre, texts, workers)
        assert parallel.chunking == sequential.chunking == (pre_name == "llama3")
        assert parallel.documents == sequential.documents and parallel.chars == sequential.chars
        assert list(parallel.chunks) == list(sequential.chunks)
        for lang, chunks in sequential.chunks.items():  # same counts, same first-occurrence order
            assert list(parallel.chunks[lang].items()) == list(chunks.items())
        weights = {"nb": 0.7, "en": 0.3}
        assert list(parallel.word_counts(weights).items()) == list(sequential.word_counts(weights).items())


@pytest.mark.slow
def test_tokenizer_is_byte_identical_for_one_and_two_workers(
        small_batches: None, shared_dir: Path, tiny_en_llama: Path) -> None:
    pairs = _demo_pairs(shared_dir)
    base = load_tokenizer(str(tiny_en_llama), what="base")
    config = TokenizerConfig(vocab_size=4096, language_weights={"nb": 0.7, "en": 0.3})
    one, two = (_json(train_tokenizer(config, iter(pairs), base, seed=5, num_workers=n)) for n in (1, 2))
    assert one == two


def _valid_files(tmp_path: Path) -> list[Path]:
    def docs(lang: str, source: str, texts: list[str]):
        for i, text in enumerate(texts):
            yield {"id": f"{source}-{i}", "text": text, "lang": lang, "source": source, "role": "target"}

    files = {"en.a": ("en", ["a" * 300] * 10), "en.b": ("en", ["b" * 100] * 3), "nb.x": ("nb", ["æøå " * 10] * 4)}
    paths = []
    for source, (lang, texts) in files.items():
        paths.append(tmp_path / f"{source}.jsonl.gz")
        write_documents(paths[-1], docs(lang, source, texts))
    return paths


def test_held_out_sample_is_capped_per_language_taking_sources_in_turn(tmp_path: Path) -> None:
    texts, measured = held_out_sample(_valid_files(tmp_path), read_documents, max_bytes=1000)
    # en: a, b, a, b (800 bytes), then the third "a"*300 cut to the 200 bytes left
    assert texts["en"] == ["a" * 300, "b" * 100] * 2 + ["a" * 200]
    assert measured["en"] == {"bytes": 1000, "documents": 5, "capped": True}
    # nb is below the cap: every document, whole (its 'æøå ' is 7 bytes; a cut lands on a character)
    assert texts["nb"] == ["æøå " * 10] * 4 and measured["nb"] == {"bytes": 280, "documents": 4, "capped": False}
    cut, _ = held_out_sample(_valid_files(tmp_path), read_documents, max_bytes=75)
    # 70 bytes whole, then 5 bytes of the next: "æø" and half an "å", which is dropped
    assert cut["nb"] == ["æøå " * 10, "æø"]


def test_held_out_sample_without_cap_is_every_document(tmp_path: Path) -> None:
    texts, measured = held_out_sample(_valid_files(tmp_path), read_documents, max_bytes=None)
    assert Counter(texts["en"]) == Counter(["a" * 300] * 10 + ["b" * 100] * 3)
    assert not measured["en"]["capped"] and measured["en"]["documents"] == 13


def test_stage_summary_times_each_part_and_metrics_say_what_was_measured(tmp_path: Path, tiny_en_llama: Path,
                                                                       shared_texts) -> None:
    from langadapt.tokenizer.stage import run

    data = tmp_path / "run" / "data"
    for split, limit in (("train", 30), ("valid", 4)):
        texts = shared_texts(f"nb.debian-handbook.{split}", limit=limit)
        write_documents(data / split / "nb.src.jsonl.gz",
                        ({"id": str(i), "text": t, "lang": "nb", "source": "nb.src", "role": "target"}
                         for i, t in enumerate(texts)))
    (tmp_path / "run" / "tokenizer").mkdir()
    ctx = StageContext(run_dir=tmp_path / "run", stage="tokenizer", seed=0, base_model=str(tiny_en_llama))
    summary = run(TokenizerSlice(TokenizerConfig(vocab_size=1000, min_vocab_fraction=0)), ctx)
    assert list(summary["parts"]) == ["load_base", "sample_count", "merges", "metrics", "shards"]
    assert all(set(p) == {"wall_s", "cpu_s"} and p["wall_s"] >= 0 for p in summary["parts"].values())
    metrics = json.loads((tmp_path / "run" / "tokenizer" / "metrics.json").read_text())
    valid_bytes = sum(len(t.encode()) for t in shared_texts("nb.debian-handbook.valid", limit=4))
    assert metrics["held_out"]["languages"]["nb"] == {"bytes": valid_bytes, "documents": 4, "capped": False}
    assert metrics["tokenizers"]["new"]["nb"]["bytes"] == valid_bytes


def test_benchmark_plateau_is_the_smallest_sample_within_half_a_percent() -> None:
    from helpers.benchmarks import load_benchmark

    bench = load_benchmark("tokenizer_sample_bound")
    rows = [{"sample": s, "chars": s, "fertility": {"nb": f}}
            for s, f in ((1, 2.0), (2, 1.52), (4, 1.507), (8, 1.5))]
    assert bench.plateau(rows, "nb") == 4  # 1.507 is within 0.5% of 1.5; 1.52 is not
