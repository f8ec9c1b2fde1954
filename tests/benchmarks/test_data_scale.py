"""benchmarks/data_scale.py's pure parts: the corpus generator, the manifest parsing and the goal
ratios, on a synthetic pack and made-up results (no ../shared, no subprocess)."""

from __future__ import annotations

import gzip
import json
import random
import re
from pathlib import Path

import pytest
from helpers.benchmarks import load_benchmark

bench = load_benchmark("data_scale")
WORD = re.compile(r"\w+")


def synthetic_pack(lang: str = "nb", docs: int = 40, seed: int = 0):
    """A pack of Zipf-distributed words over a 3,000-word vocabulary, a few duplicate documents."""
    rng = random.Random(seed)
    vocab = ["".join(rng.choice("abcdefghijklmnoprstuvyæøå") for _ in range(rng.randint(3, 9)))
             for _ in range(3000)]
    weights = [1 / (rank + 1) for rank in range(len(vocab))]
    texts = [" ".join(rng.choices(vocab, weights, k=rng.randint(200, 1200))) + ".\n\"quoted\" \\ line"
             for _ in range(docs)]
    records = [(f"doc{i}", text) for i, text in enumerate(texts)] + [("dup", texts[0])]
    return bench.build_pack(lang, records)


def read_corpus(folder: Path, lang: str) -> list[dict]:
    docs = []
    for path in sorted(folder.glob(f"{lang}-*")):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            docs += [json.loads(line) for line in f]
    return docs


def test_build_pack_drops_duplicate_texts_and_counts_words():
    pack = synthetic_pack()
    assert len(pack.docs) == 40  # the duplicate of doc0 is gone
    assert pack.words == sum(len(WORD.findall(d.text)) for d in pack.docs)
    assert pack.distinct == len({w for d in pack.docs for w in WORD.findall(d.text)})
    assert all(json.loads(f'"{d.body}"') == d.text for d in pack.docs)


@pytest.mark.parametrize("target", [150_000, 1_000_000])
def test_generated_documents_are_unique_and_the_size_is_met(tmp_path: Path, target: int):
    pack = synthetic_pack()
    one_pass = sum(d.nbytes for d in pack.docs)
    meta = bench.generate_language(pack, target, tmp_path, file_bytes=200_000, big_share=0.25)
    docs = read_corpus(tmp_path, "nb")
    text_bytes = sum(len(d["text"].encode("utf-8")) for d in docs)
    assert abs(text_bytes - target) <= 0.1 * target
    assert meta["text_bytes"] == text_bytes and meta["docs"] == len(docs)
    assert meta["copies"] == (1 if target < one_pass else pytest.approx(target / one_pass, abs=1))
    assert len({d["id"] for d in docs}) == len(docs)
    assert len({d["text"] for d in docs}) == len(docs)  # exact dedup keeps every one
    assert meta["words"] == sum(len(WORD.findall(d["text"])) for d in docs)


def test_files_one_uncompressed_then_gzip_ones_of_about_the_asked_size(tmp_path: Path):
    meta = bench.generate_language(synthetic_pack(), 1_000_000, tmp_path, file_bytes=200_000, big_share=0.25)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == meta["files"]
    assert names[0] == "nb-000.jsonl" and all(n.endswith(".jsonl.gz") for n in names[1:])
    assert len(names) == 1 + 4  # 750 kB of text left for the gzip files, 200 kB each at most
    big = sum(len(json.loads(line)["text"].encode()) for line in (tmp_path / names[0]).open(encoding="utf-8"))
    assert 0.2 * 1_000_000 <= big <= 0.3 * 1_000_000


def test_plan_files_has_two_gzip_files_at_least_and_no_big_file_without_a_share():
    files = bench.plan_files("en", 1000, file_bytes=10**9, big_share=0.0)
    assert [(f.name, f.gzipped) for f in files] == [("en-000.jsonl.gz", True), ("en-001.jsonl.gz", True)]


def test_distinct_words_grow_as_heaps_law_says(tmp_path: Path):
    """Prefixes alone would keep the pack's vocabulary at any size; the compounds make it grow
    as V0 * (N / N0) ** beta, checked on the written text."""
    pack = synthetic_pack()
    one_pass = sum(d.nbytes for d in pack.docs)
    meta = bench.generate_language(pack, 16 * one_pass, tmp_path, file_bytes=10**9, big_share=0.0)
    docs = read_corpus(tmp_path, "nb")
    distinct = {w for d in docs for w in WORD.findall(d["text"])}
    words = meta["words"]
    expected = pack.distinct * (words / pack.words) ** bench.HEAPS_BETA
    assert meta["copies"] >= 15
    assert abs(len(distinct) - expected) <= 0.05 * expected, (len(distinct), expected)
    assert abs(meta["distinct_words"] - len(distinct)) <= 0.02 * len(distinct)
    assert len(distinct) > 3 * pack.distinct


def test_compounds_are_distinct_for_distinct_indices():
    pack = synthetic_pack()
    words = [bench.compound(pack, k) for k in range(20_000)]
    pairs = {(bench.PRIME * k) % len(pack.vocab) ** 2 for k in range(20_000)}
    assert len(pairs) == 20_000
    assert len(set(words)) >= 19_900  # joined strings may rarely coincide ("ab"+"c" = "a"+"bc")


def test_generate_corpus_is_deterministic_and_cached(tmp_path: Path):
    packs = {"nb": synthetic_pack("nb"), "en": synthetic_pack("en", seed=1)}
    first, meta = bench.generate_corpus(0.0006, tmp_path / "a", file_mb=0.1, packs=packs)
    second, _ = bench.generate_corpus(0.0006, tmp_path / "b", file_mb=0.1, packs=packs)
    assert abs(meta["text_bytes"] - 600_000) <= 60_000
    assert {p.name for p in first.iterdir()} == {p.name for p in second.iterdir()}
    for path in first.iterdir():
        if path.name != "corpus.json":
            assert path.read_bytes() == (second / path.name).read_bytes(), path.name
    stamp = (first / "nb-001.jsonl.gz").stat().st_mtime_ns
    again, meta_again = bench.generate_corpus(0.0006, tmp_path / "a", file_mb=0.1, packs=packs)
    assert again == first and meta_again == meta
    assert (first / "nb-001.jsonl.gz").stat().st_mtime_ns == stamp  # reused, not written again
    bench.generate_corpus(0.0006, tmp_path / "a", file_mb=0.05, packs=packs)  # other params: regenerated
    assert json.loads((first / "corpus.json").read_text())["params"]["file_mb"] == 0.05


def test_recipe_points_at_the_corpus_and_the_run_root(tmp_path: Path):
    import yaml

    recipe = yaml.safe_load(bench.write_recipe(tmp_path / "r.yaml", "n", tmp_path / "c", tmp_path / "runs")
                            .read_text())
    assert recipe["run_root"] == str(tmp_path / "runs")
    assert [s["path"] for s in recipe["data"]["sources"]] == [f"{tmp_path}/c/nb-*.jsonl*",
                                                               f"{tmp_path}/c/en-*.jsonl*"]


def test_parse_parts_reads_parts_and_tolerates_their_absence():
    assert bench.parse_parts({}) is None
    assert bench.parse_parts({"parts": "nonsense"}) is None
    assert bench.parse_parts({"parts": {"clean": {"wall_s": 1.5, "cpu_s": 3}, "odd": 7}}) == {
        "clean": {"wall_s": 1.5, "cpu_s": 3.0}}
    nested = {"sources": {}, "run": {"workers": 2, "parts": {"clean": {"wall_s": 2, "cpu_s": 4},
                                                             "workers_clean": {"cpu_s": 3.5}}}}
    assert bench.parse_parts(nested) == {"clean": {"wall_s": 2.0, "cpu_s": 4.0},
                                         "workers_clean": {"wall_s": None, "cpu_s": 3.5}}
    assert bench.timed_cpu(bench.parse_parts(nested)) == 4.0  # a CPU-only part is not subtracted


def usage(cpu: float, wall: float, rss: float) -> object:
    return bench.Usage(wall_s=wall, cpu_s=cpu, maxrss_mb=rss, parent_peak_mb=rss, workers_peak_mb=rss / 2,
                       tree_peak_mb=rss * 1.5)


def result(size: float, workers: int, cpu: float, wall: float, rss: float, parts: bool = True) -> object:
    corpus = {"text_bytes": int(size * 1e9), "docs": 1000, "words": 2_000_000}
    data_parts = {"clean": {"wall_s": wall / 4, "cpu_s": cpu / 4}} if parts else None
    tok_parts = {"merges": {"wall_s": 2.0, "cpu_s": 2.0 * size}, "shards": {"wall_s": 1.0, "cpu_s": 1.0}}
    return bench.RunResult(size_gb=size, text_gb=size, workers=workers, corpus=corpus, stages=[
        bench.StageResult("data", usage(cpu / 2, wall / 2, rss), data_parts,
                          {"parts": data_parts or {}, "dedup": {"digests": 500}}, wall / 2),
        bench.StageResult("tokenizer", usage(cpu / 2, wall / 2, rss * size), tok_parts,
                          {"distinct_words": 40_000, "vocab_size": 8192}, wall / 2)])


def test_summarise_gives_the_goal_ratios_and_the_json_line():
    # CPU: 200 s/GB plus a fixed 100 s with 2 workers (start-up), 0 with one
    results = [result(0.5, 1, 100.0, 100.0, 400.0), result(0.5, 2, 200.0, 55.0, 400.0),
               result(5.0, 1, 1000.0, 1000.0, 400.0), result(5.0, 2, 1100.0, 500.0, 400.0)]
    lines, record = bench.summarise(results, all_workers=2)
    assert record["benchmark"] == "data_scale" and record["unit"] == "CPU-s/GB"
    assert record["value"] == 220.0 and record["baseline"] == 200.0 and record["ratio"] == 1.1
    assert record["speedup"] == {"0.5GB": 1.82, "5GB": 2.0}
    assert record["rss_ratio"] == pytest.approx(5.0)  # max(data 400, tokenizer 400 * size): 2000 / 400
    assert record["tokenizer_training_cpu_s"] == {"0.5GB": 1.0, "5GB": 10.0}
    assert record["marginal_cpu_s_per_gb"] == pytest.approx(200.0)  # (1100 - 200) / 4.5: no fixed cost
    assert record["headline_core_hours"] == round(200.0 * 500 / 3600)  # the marginal rate, not 220
    assert lines[-1].startswith("headline recipe (recipes/norwegian_warm.yaml") and "128-core node" in lines[-1]
    json.dumps(record)  # the last line must serialise


def test_summarise_with_one_size_one_worker_count_and_no_parts():
    lines, record = bench.summarise([result(0.1, 1, 30.0, 30.0, 100.0, parts=False)], all_workers=1)
    assert record["value"] == 300.0 and record["baseline"] is None and record["ratio"] is None
    assert record["rss_ratio"] is None and record["speedup"] == {} and record["marginal_cpu_s_per_gb"] is None
    assert record["headline_core_hours"] == round(300.0 * 500 / 3600)  # the average: no slope with one size
    assert any("needs two sizes of at least 0.5 GB" in line for line in lines)


def test_table_shows_parts_other_and_cpu_per_gb():
    rows = bench.table_rows(result(0.5, 2, 100.0, 50.0, 400.0))
    by_part = {(r[2], r[3]): r for r in rows}
    assert by_part[("data", "clean")][6] == "50.0"  # 25 CPU s over 0.5 GB
    assert by_part[("data", "other (start-up, imports, ...)")][5] == "25.0"  # 50 - 25
    assert by_part[("data+tokenizer", "(total)")][6] == "200.0"
    cpu_only = result(0.5, 2, 100.0, 50.0, 400.0)
    cpu_only.stages[0].parts["workers"] = {"wall_s": None, "cpu_s": 20.0}
    with_cpu_only = {(r[2], r[3]): r for r in bench.table_rows(cpu_only)}
    assert with_cpu_only[("data", "(workers: CPU only)")][4:7] == ["-", "20.0", "40.0"]
    assert with_cpu_only[("data", "other (start-up, imports, ...)")][5] == "25.0"  # still 50 - 25
    no_parts = bench.table_rows(result(0.5, 2, 100.0, 50.0, 400.0, parts=False))
    assert ["", "", "data", "(no parts in the manifest)"] == no_parts[1][:4]
    assert bench.render(rows).count("\n") == len(rows) + 1


def test_growth_reports_digests_per_million_documents_and_words_per_million_words():
    run = result(0.5, 2, 100.0, 50.0, 400.0)
    run.stages[0].summary["run"] = {"parts": {"unique_pass": {"wall_s": 1, "cpu_s": 1}}}  # a part, not a count
    found = {key: (value, rate) for key, value, rate in bench.growth(run)}
    assert found == {"data.dedup.digests": (500.0, "500,000 per M docs"),
                     "tokenizer.distinct_words": (40_000.0, "20,000 per M words")}


def test_parse_workers():
    assert bench.parse_workers("1,all", 4) == [1, 4]
    assert bench.parse_workers("1,all", 1) == [1]
    with pytest.raises(SystemExit):
        bench.parse_workers("0", 2)


def test_without_shared_it_says_so_and_exits_0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]):
    monkeypatch.setattr(bench, "CORPORA", tmp_path / "missing" / "corpora")
    assert bench.main(["--smoke"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert "needs ../shared" in out[0]
    assert json.loads(out[-1]) == {"benchmark": "data_scale", "metric": "cpu_s_per_gb", "value": None,
                                   "baseline": None, "ratio": None, "unit": "CPU-s/GB", "skipped": "no ../shared"}
