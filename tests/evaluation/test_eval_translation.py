"""The translation task: paragraph alignment, the length filter, the metric (lm-eval's), the held-out
guarantee on the demo's real data stage, and the task run end to end on a tiny model, offline."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
import sacrebleu
import torch
from helpers.synthetic import tiny_byte_level_pair

from langadapt.corpora.debian_docs import default_cache_dir
from langadapt.data import stage as data_stage
from langadapt.data.documents import iter_split, write_documents
from langadapt.errors import LangadaptError
from langadapt.evaluation.evaluate import evaluate_models
from langadapt.evaluation.parallel import (
    PairLimits,
    align_page,
    handbook_pairs,
    handbook_source,
    held_out_documents,
    held_out_pages,
    interleave_pages,
    page_key,
    parallel_pages,
)
from langadapt.evaluation.suite import REPO_ROOT, TranslationTask, load_suite
from langadapt.evaluation.translation import LineDone, answer, build_prompt, corpus_scores, translate
from langadapt.recipe import load_recipe
from langadapt.recipe.data import DataConfig, DataSlice
from langadapt.recipe.evaluation import EvaluationConfig
from langadapt.run.context import StageContext
from langadapt.run.layout import RunLayout

SHIPPED = REPO_ROOT / "eval" / "data" / "translation_nb_en.jsonl"
DEMO = REPO_ROOT / "recipes" / "tiny_norwegian_warm.yaml"
NB = ["Debian er et operativsystem som mange bruker på servere.", "Pakken er ikke installert på maskinen.",
      "Dette er en tekst om hvordan du kan installere en ny pakke med apt."]
EN = ["Debian is an operating system that many people use on servers.", "The package is not installed on the machine.",
      "This is a text about how you can install a new package with apt."]


def _page(blocks: list[str]) -> bytes:
    """A DocBook-like page: navigation (skipped by the extractor) and one div.para per block."""
    body = "".join(f'<div class="para">{b}</div>' for b in blocks)
    return f'<html><body><div class="navheader">Prev Next</div>{body}</body></html>'.encode()


# --- alignment and the length filter -------------------------------------------------------------

def test_blocks_pair_by_position_and_an_untranslated_block_is_dropped():
    untranslated = "This block was never translated and is still in English for the reader."
    nb = [NB[0], untranslated, NB[1]]
    en = [EN[0], untranslated, EN[1]]
    assert align_page(nb, en, ("nb", "en"), PairLimits()) == [(NB[0], EN[0]), (NB[1], EN[1])]


def test_a_page_whose_block_counts_differ_gives_no_pairs():
    assert align_page(NB[:2], EN[:3], ("nb", "en"), PairLimits()) == []


def test_length_filter_bounds_and_ratio():
    limits = PairLimits(min_chars=20, max_chars=300, max_ratio=1.5)
    assert limits.accept("a" * 100, "b" * 150)          # exactly 1.5x: kept
    assert not limits.accept("a" * 100, "b" * 151)      # just over: dropped, either way round
    assert not limits.accept("a" * 151, "b" * 100)
    assert not limits.accept("a" * 19, "b" * 19)        # a heading-sized side
    assert not limits.accept("a" * 301, "b" * 300)      # too long to generate in CI
    merged = NB[0] + " " + NB[1] + " " + NB[2]          # a translator merged three blocks into one
    assert align_page([merged], [EN[0]], ("nb", "en"), limits) == []


def test_pages_match_by_name_across_locale_folders_and_keep_page_restricts():
    nb = {"html/nb-NO/a.html": _page(NB[:2]), "html/nb-NO/b.html": _page(NB[2:]), "html/nb-NO/s.css": b"x"}
    en = {"html/en-US/a.html": _page(EN[:2]), "html/en-US/b.html": _page(EN[2:])}
    rows = list(parallel_pages(nb, en, ("nb", "en"), PairLimits()))
    assert rows == [{"nb": NB[0], "en": EN[0], "page": "a.html"}, {"nb": NB[1], "en": EN[1], "page": "a.html"},
                    {"nb": NB[2], "en": EN[2], "page": "b.html"}]
    assert [r["page"] for r in parallel_pages(nb, en, ("nb", "en"), PairLimits(), {"b.html"})] == ["b.html"]


def _docs(count: int = 200) -> dict[str, list[dict]]:
    """A page and its translation per i, as `debian_docs` writes them (the id's file name shared)."""
    return {"nb": [{"id": f"debian-handbook/html/nb-NO/p{i}.html", "text": f"side {i}"} for i in range(count)],
            "en": [{"id": f"debian-handbook/html/en-US/p{i}.html", "text": f"page {i}"} for i in range(count)]}


def _data(tmp_path: Path, **settings) -> DataConfig:
    """A data section reading the two sources of `_docs` (nb the target, en replay) from tmp_path."""
    return DataConfig(sources=[{"name": "nb", "path": str(tmp_path / "nb.jsonl.gz"), "lang": "nb", "role": "target"},
                               {"name": "en", "path": str(tmp_path / "en.jsonl.gz"), "lang": "en", "role": "replay"}],
                      **settings)


def test_held_out_pages_need_every_language_held_out(tmp_path):
    docs, data = _docs(), _data(tmp_path, valid_fraction=0.3)
    both = held_out_pages(docs, data)
    nb_only, en_only = held_out_pages({"nb": docs["nb"]}, data), held_out_pages({"en": docs["en"]}, data)
    assert both == nb_only & en_only and 20 < len(nb_only) < 100 and both < nb_only
    assert held_out_pages(docs, _data(tmp_path, valid_fraction=0.0, min_valid_documents=0)) == set()


def test_held_out_pages_by_id_are_those_held_out_in_any_one_language(tmp_path):
    """`split_by: id` (the demo): a page and its translation share their fate, so every page held out
    in nb is held out in en too, unlike the text split above."""
    docs = _docs()
    both = held_out_pages(docs, _data(tmp_path, valid_fraction=0.3, split_by="id"))
    assert both == held_out_pages({"nb": docs["nb"]}, _data(tmp_path, valid_fraction=0.3, split_by="id"))
    assert 40 < len(both) < 100 and len(both) > 2 * len(held_out_pages(docs, _data(tmp_path, valid_fraction=0.3)))


def test_held_out_pages_keep_the_cap_of_max_valid_docs(tmp_path):
    """Issue 39: the pairs' own copy of the split had no `max_valid_docs`: capped pages, trained by
    the data stage, could give pairs."""
    docs = _docs()
    uncapped = held_out_pages(docs, _data(tmp_path, valid_fraction=0.3, split_by="id"))
    capped = held_out_pages(docs, _data(tmp_path, valid_fraction=0.3, split_by="id", max_valid_docs=5))
    assert len(capped) == 5 and capped < uncapped


@pytest.mark.parametrize("settings", [
    {"valid_fraction": 0.3},
    {"valid_fraction": 0.3, "split_by": "id", "max_valid_docs": 7},
    {"valid_fraction": 0.004, "split_by": "id", "min_valid_documents": 4},  # the floor tops up the target (nb) only
    {"valid_fraction": 0.2, "max_valid_docs": 9, "cleaning": {"min_chars": 7}},  # cleaning drops the short pages
], ids=["text", "id-capped", "id-floor", "text-capped-cleaned"])
def test_the_pairs_hold_out_what_the_data_stage_holds_out(tmp_path, settings):
    """The real data stage (`data.stage.run`) and the pair builder, on the same documents, hold out
    the same documents of each source: the builder runs the stage's own split, not a copy."""
    docs = _docs(120)
    docs["nb"] += [dict(docs["nb"][3], id="debian-handbook/html/nb-NO/copy.html"), {"id": "x/nb-NO/e.html", "text": " "}]
    data = _data(tmp_path, **settings)
    for source in data.sources:
        write_documents(Path(source.path), docs[source.name])
    layout = RunLayout(tmp_path / "run")
    data_stage.run(DataSlice(data), StageContext(layout.root, "data", seed=0))
    stage_held = {name: {doc["text"] for doc in iter_split(layout.data.root, "valid") if doc["source"] == name}
                  for name in docs}
    builder_held = {name: {doc["text"] for doc in held} for name, held in held_out_documents(docs, data).items()}
    assert builder_held == stage_held and all(stage_held.values())
    by_page = {name: {page_key(d["id"]) for d in docs[name] if d["text"].strip() in held} for name, held in stage_held.items()}
    assert held_out_pages(docs, data) == by_page["nb"] & by_page["en"]


def test_the_handbook_source_of_a_language_is_the_recipes():
    data = load_recipe(DEMO).recipe.data
    assert (handbook_source(data, "nb"), handbook_source(data, "en")) == ("nb.debian-handbook", "en.debian-handbook")
    with pytest.raises(LangadaptError, match="no source reads the debian-handbook in de"):
        handbook_source(data, "de")


def test_interleaved_pairs_take_turns_between_pages():
    rows = [{"page": p, "n": str(i)} for p, n in (("a", 3), ("b", 1), ("c", 2)) for i in range(n)]
    assert [(r["page"], r["n"]) for r in interleave_pages(rows)] == [
        ("a", "0"), ("b", "0"), ("c", "0"), ("a", "1"), ("c", "1"), ("a", "2")]


# --- the metric ----------------------------------------------------------------------------------

HYPS = ["The cat sat on the mat.", "Debian is a free operating system", "install the package with apt"]
REFS = ["The cat sat on the mat.", "Debian is a free operating system.", "Install the package using apt-get."]


def test_scores_are_lm_evals_aggregations():
    metrics = pytest.importorskip("lm_eval.api.metrics")
    items = list(zip(REFS, HYPS))  # lm-eval's (reference, prediction) items
    scores = corpus_scores(HYPS, REFS)
    assert scores["bleu"] == pytest.approx(metrics.bleu(items), abs=1e-9)
    assert scores["chrf"] == pytest.approx(metrics.chrf(items), abs=1e-9)


def test_scores_are_sacrebleus_and_bounded():
    scores = corpus_scores(HYPS, REFS)
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(HYPS, [REFS]).score)
    assert 0 < scores["bleu"] < scores["chrf"] < 100  # BLEU punishes the near misses harder
    assert corpus_scores(REFS, REFS) == {"chrf": pytest.approx(100.0), "bleu": pytest.approx(100.0)}
    assert corpus_scores(["", "", ""], REFS) == {"chrf": 0.0, "bleu": 0.0}


# --- prompt and answer ---------------------------------------------------------------------------

def test_prompt_is_lm_evals_wmt_format():
    rows = [{"nb": NB[0], "en": EN[0]}, {"nb": NB[1], "en": EN[1]}]
    prompt = build_prompt(rows[:1], rows[1], "en", "nb", {"nb": "Norwegian Bokmål", "en": "English"})
    assert prompt == f"English: {EN[0]}\nNorwegian Bokmål: {NB[0]}\n\nEnglish: {EN[1]}\nNorwegian Bokmål:"
    assert build_prompt([], rows[0], "nb", "en", {}) == f"nb: {NB[0]}\nen:"


def test_answer_is_the_first_line_with_text():
    assert answer(" Pakken er klar.\nEnglish: more") == "Pakken er klar."
    assert answer("\n\n  Pakken er klar.  \n") == "Pakken er klar."  # a leading newline does not end it
    assert answer("\n") == ""


def test_generation_stops_per_row_after_a_line_with_text(tiny):
    _, tok = tiny
    prompt = tok("Norsk: Pakken\nEnglish:", add_special_tokens=False)["input_ids"]
    rows = ["\n\n", " The package", " The package\n", "\n The package\nNorsk"]
    encoded = [tok(r, add_special_tokens=False)["input_ids"] for r in rows]
    width = max(map(len, encoded))
    pad = tok.convert_tokens_to_ids("</s>")  # skipped when decoding, as left padding would be
    ids = torch.tensor([prompt + e + [pad] * (width - len(e)) for e in encoded])
    assert LineDone(tok, len(prompt))(ids, None).tolist() == [False, False, True, True]


# --- suites --------------------------------------------------------------------------------------

def _suite(tmp_path: Path, task: dict, rows: list[dict] | None = None) -> Path:
    if rows is not None:
        (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    suite = {"name": "tr", "tasks": [{"kind": "translation", "path": "pairs.jsonl", **task}]}
    path = tmp_path / "suite.yaml"
    path.write_text(json.dumps(suite))
    return path


def test_the_multilingual_suite_scores_the_shipped_pairs_both_ways():
    task = next(t for t in load_suite(REPO_ROOT / "eval" / "multilingual.yaml").tasks if t.kind == "translation")
    assert isinstance(task, TranslationTask) and Path(task.path) == SHIPPED.resolve()
    assert task.directions == ["nb-en", "en-nb"]
    rows = [json.loads(line) for line in SHIPPED.read_text().splitlines()]
    assert len(rows) > task.num_fewshot and all(PairLimits().accept(r["nb"], r["en"]) for r in rows)


def test_a_bad_direction_is_one_line_naming_the_suite(tmp_path):
    path = _suite(tmp_path, {"directions": ["nb-nb"]}, [{"nb": NB[0], "en": EN[0]}])
    with pytest.raises(LangadaptError, match=r"suite.yaml:\d+: .*directions.*'nb-nb' is not SRC-TGT"):
        load_suite(path)


def test_a_row_missing_a_language_is_named_by_file_and_line(tmp_path):
    path = _suite(tmp_path, {"directions": ["nb-en"]}, [{"nb": NB[0], "en": EN[0]}, {"nb": NB[1], "sv": "x"}])
    with pytest.raises(LangadaptError, match=r"pairs.jsonl:2: expected an object with string key\(s\) en"):
        evaluate_models({"m": lambda: pytest.fail("planning must fail before a model loads")},
                        [load_suite(path)], {}, EvaluationConfig())


def test_too_few_pairs_for_the_examples_fails_before_any_model(tmp_path):
    path = _suite(tmp_path, {"directions": ["nb-en"], "num_fewshot": 2}, [{"nb": NB[0], "en": EN[0]}] * 2)
    with pytest.raises(LangadaptError, match="2 pair\\(s\\), none left to score after num_fewshot=2"):
        evaluate_models({"m": lambda: pytest.fail("planning must fail before a model loads")},
                        [load_suite(path)], {}, EvaluationConfig())


# --- end to end on a tiny model ------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny() -> tuple:
    """A tiny random Llama and a byte-level tokenizer that decodes back to text."""
    return tiny_byte_level_pair((NB + EN) * 5)


def test_the_task_runs_offline_and_scores_what_the_model_wrote(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, tok = tiny
    rows = [{"nb": n, "en": e} for n, e in zip(NB, EN)]
    path = _suite(tmp_path, {"directions": ["nb-en", "en-nb"], "num_fewshot": 1, "max_new_tokens": 12,
                             "names": {"nb": "Norsk", "en": "English"}}, rows)
    results = evaluate_models({"a": (model, tok), "b": (model, tok)}, [load_suite(path)], {}, EvaluationConfig())
    task = results["tasks"]["tr/translation"]
    assert task["kind"] == "translation" and task["a"] == task["b"]  # greedy: the same model, the same numbers
    for direction, (src, tgt) in {"nb-en": ("nb", "en"), "en-nb": ("en", "nb")}.items():
        prompts = [build_prompt(rows[:1], r, src, tgt, {"nb": "Norsk", "en": "English"}) for r in rows[1:]]
        hyps = translate(model, tok, prompts, 12, batch_size=1)  # one at a time: padding must not matter
        assert task["a"][direction] == {**corpus_scores(hyps, [r[tgt] for r in rows[1:]]), "pairs": 2}
    assert results["task_deltas"]["tr/translation"]["b"] == {
        "nb-en/chrf": 0.0, "nb-en/bleu": 0.0, "en-nb/chrf": 0.0, "en-nb/bleu": 0.0}


def test_a_model_that_copies_the_reference_scores_100(tiny):
    """Scoring reads the generated continuation, not the prompt: a stand-in that writes the reference
    (then a newline and more) gets chrF and BLEU 100."""
    model, tok = tiny
    reference = EN[1]

    class Writes:
        config = model.config

        def parameters(self):
            return model.parameters()

        def generate(self, input_ids, **_):
            ids = tok(" " + reference + "\nNorsk: more", add_special_tokens=False)["input_ids"]
            return torch.cat([input_ids, torch.tensor([ids] * len(input_ids))], dim=1)

    hyps = translate(Writes(), tok, [build_prompt([], {"nb": NB[1], "en": reference}, "nb", "en", {})], 40, 8)
    assert hyps == [reference] and corpus_scores(hyps, [reference])["chrf"] == pytest.approx(100.0)


# --- held out from the demo's training -----------------------------------------------------------

def _demo_corpora() -> None:
    """Skip unless the demo's corpus files are built (they are git-ignored; corpora/build.py)."""
    names = [Path(s.path).name for s in load_recipe(DEMO).recipe.data.sources]
    missing = [n for n in names if not (REPO_ROOT / "corpora" / "build" / n).is_file()]
    if missing:
        pytest.skip(f"demo corpora not built ({', '.join(missing)}); run python corpora/build.py")


def test_no_pair_is_in_the_demos_training_split(tmp_path):
    """The real data stage of the demo recipe, run here: no text of a shipped pair is in a training
    document of any source, and every pair's page is held out in both languages."""
    _demo_corpora()
    subprocess.run([sys.executable, "-m", "langadapt.cli", "run", str(DEMO), "--until", "data",
                    "--set", f"run_root={tmp_path}"], check=True, capture_output=True, cwd=REPO_ROOT)
    data = RunLayout(tmp_path / "tiny_norwegian_warm").data

    def texts(folder: Path) -> list[str]:
        return [json.loads(line)["text"] for f in sorted(folder.glob("*.jsonl.gz")) for line in gzip.open(f, "rt")]

    train, valid = "\n".join(texts(data.train)), "\n".join(texts(data.valid))
    rows = [json.loads(line) for line in SHIPPED.read_text().splitlines()]
    # split_by: id holds pages out in both languages: ~10 pages, 200+ pairs (by text: 1 page, 5 pairs).
    assert len(rows) >= 100 and len({row["page"] for row in rows}) >= 8
    for row in rows:
        assert row["nb"] not in train and row["en"] not in train, row["page"]
        assert row["nb"] in valid and row["en"] in valid, row["page"]


@pytest.mark.slow  # parses the handbook's 254 pages twice: ~15 s on a loaded 2-core machine
def test_the_shipped_pairs_are_rebuilt_identically():
    """Deterministic: the builder, from the cached handbook package, writes the shipped file again."""
    debs = sorted(default_cache_dir().glob("debian-handbook_*.deb")) + sorted(
        (REPO_ROOT / "corpora" / "cache").glob("debian-handbook_*.deb"))
    if not debs:
        pytest.skip("debian-handbook .deb not in the package cache (python corpora/build.py fetches it)")
    rows = handbook_pairs(debs[-1], ("nb-NO", "en-US"), load_recipe(DEMO).recipe.data)
    assert rows == [json.loads(line) for line in SHIPPED.read_text().splitlines()]


# --- which models translate (issue 38) -------------------------------------------------------------

def test_models_limits_generation_to_the_models_the_task_compares(tiny, tmp_path, monkeypatch):
    """`models: [base, adapted]`: init_random is scored by the suite's other tasks but never asked
    to translate (no generate call on it), and the report is written without its row."""
    from langadapt.evaluation.report import write_report

    model, tok = tiny
    rows = [{"nb": n, "en": e} for n, e in zip(NB, EN)]
    path = _suite(tmp_path, {"directions": ["nb-en"], "max_new_tokens": 4, "models": ["base", "adapted"]}, rows)
    with open(path) as f:  # a bpb task beside it: every model still runs that one
        suite = json.load(f)
    suite["tasks"].append({"kind": "bpb", "files": {"nb": [str(tmp_path / "nb.txt")]}})
    (tmp_path / "nb.txt").write_text(" ".join(NB))
    path.write_text(json.dumps(suite))

    class Counting:
        """The tiny model, counting its `generate` calls per name."""

        calls: dict[str, int] = {}

        def __init__(self, name: str) -> None:
            self.name = name

        def __getattr__(self, attr):
            return getattr(model, attr)

        def __call__(self, *args, **kwargs):
            return model(*args, **kwargs)

        def generate(self, *args, **kwargs):
            Counting.calls[self.name] = Counting.calls.get(self.name, 0) + 1
            return model.generate(*args, **kwargs)

    models = {name: (Counting(name), tok) for name in ("base", "init_random", "adapted")}
    results = evaluate_models(models, [load_suite(path)], {}, EvaluationConfig())
    assert set(Counting.calls) == {"base", "adapted"}
    task = results["tasks"]["tr/translation"]
    assert set(task) == {"kind", "base", "adapted"}
    assert set(results["translations"]["tr/translation"]["outputs"]) == {"base", "adapted"}
    assert set(results["models"]) == {"base", "init_random", "adapted"}  # bpb: every model
    assert results["models"]["init_random"]["nb"]["bits_per_byte"] > 0
    write_report(results, tmp_path / "out", title="t")
    assert (tmp_path / "out" / "report.md").is_file()


def test_a_model_listed_but_not_scored_is_a_note_and_a_bad_list_is_one_line(tiny, tmp_path):
    model, tok = tiny
    rows = [{"nb": n, "en": e} for n, e in zip(NB, EN)]
    path = _suite(tmp_path, {"directions": ["nb-en"], "max_new_tokens": 2, "models": ["base", "stage1"]}, rows)
    results = evaluate_models({"base": (model, tok), "adapted": (model, tok)}, [load_suite(path)], {},
                              EvaluationConfig())
    assert set(results["tasks"]["tr/translation"]) == {"kind", "base"}
    assert ("tr/translation: models stage1 not among the models scored (base, adapted); translated by base"
            in results["notes"])
    for bad, why in (([], "at least 1 item"), (["base", "base"], "named twice"), (["base", " "], "name is empty")):
        path = _suite(tmp_path, {"directions": ["nb-en"], "models": bad}, rows)
        with pytest.raises(LangadaptError, match=rf"suite.yaml:\d+: task #1 \(translation\): models: .*{why}"):
            load_suite(path)
