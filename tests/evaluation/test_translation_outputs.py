"""The translation task explained (issue 38): every model's translations are kept per model and
direction (as lm-eval's --log_samples keeps its outputs) and a few are shown in the report; the
report says chrF/BLEU are higher-is-better, which way each task row's Δ is a gain, and, judged
against copying the source unchanged, whether any model translates at all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.synthetic import tiny_byte_level_pair

from langadapt.evaluation.evaluate import evaluate_models
from langadapt.evaluation.render import TEXT_HEADER, build_blocks, render_html, render_markdown, visible
from langadapt.evaluation.report import translation_file, write_report
from langadapt.evaluation.suite import TranslationTask, load_suite
from langadapt.evaluation.tables import better, task_rows, translation_verdicts
from langadapt.evaluation.translation import copy_source_scores, corpus_scores
from langadapt.recipe.evaluation import EvaluationConfig

NB = ["Debian er et operativsystem som mange bruker på servere.", "Pakken er ikke installert på maskinen.",
      "Dette er en tekst om hvordan du kan installere en ny pakke med apt.", "Maskinen starter på nytt nå."]
EN = ["Debian is an operating system that many people use on servers.", "The package is not installed on the machine.",
      "This is a text about how you can install a new package with apt.", "The machine restarts now."]
ROWS = [{"nb": n, "en": e} for n, e in zip(NB, EN)]


@pytest.fixture(scope="module")
def tiny() -> tuple:
    """A tiny random Llama and a byte-level tokenizer that decodes back to text."""
    return tiny_byte_level_pair((NB + EN) * 5)


@pytest.fixture(scope="module")
def evaluated(tiny, tmp_path_factory) -> tuple[dict, Path]:
    """Two models (the same weights under two names) on a two-direction task, report written."""
    folder = tmp_path_factory.mktemp("translation")
    (folder / "pairs.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ROWS))
    suite = {"name": "tr", "tasks": [{"kind": "translation", "path": "pairs.jsonl", "directions": ["nb-en", "en-nb"],
                                      "num_fewshot": 1, "max_new_tokens": 8}]}
    (folder / "suite.yaml").write_text(json.dumps(suite))
    model, tok = tiny
    results = evaluate_models({"base": (model, tok), "run/adapted": (model, tok)}, [load_suite(folder / "suite.yaml")],
                              {}, EvaluationConfig())
    write_report(results, folder / "out", title="t")
    return results, folder / "out"


def test_every_model_and_direction_gets_a_file_of_its_translations(evaluated) -> None:
    results, out = evaluated
    written = json.loads((out / "results.json").read_text())["translations"]["tr/translation"]
    assert set(written["files"]) == {"base", "run/adapted"}
    for model in ("base", "run/adapted"):
        for direction, (src, tgt) in {"nb-en": ("nb", "en"), "en-nb": ("en", "nb")}.items():
            path = out / written["files"][model][direction]
            assert path == out / translation_file("tr/translation", model, direction)
            assert path.parent == out / "translations" / "tr" / "translation"  # a model named a/b is one file
            lines = [json.loads(line) for line in path.read_text("utf-8").splitlines()]
            # the rows after the one few-shot example, each with what the model wrote
            assert [(r["doc_id"], r["source"], r["reference"]) for r in lines] == [
                (i, ROWS[i][src], ROWS[i][tgt]) for i in (1, 2, 3)]
            hypotheses = [r["hypothesis"] for r in lines]
            # the corpus score in the results is the score of exactly these translations
            assert results["tasks"]["tr/translation"][model][direction] == {
                **corpus_scores(hypotheses, [r["reference"] for r in lines]), "pairs": 3}
            assert all(0.0 <= r["chrf"] <= 100.0 for r in lines)


def test_results_json_keeps_paths_and_examples_not_every_translation(evaluated) -> None:
    _, out = evaluated
    written = json.loads((out / "results.json").read_text())["translations"]["tr/translation"]
    assert set(written) == {"copy_source", "files", "examples"}
    example = written["examples"]["nb-en"][0]
    assert (example["source"], example["reference"]) == (NB[1], EN[1])
    assert set(example["hypotheses"]) == {"base", "run/adapted"}


def test_the_report_shows_the_first_translations_beside_source_and_reference(evaluated) -> None:
    _, out = evaluated
    written = json.loads((out / "results.json").read_text())
    hypotheses = {model: json.loads((out / translation_file("tr/translation", model, "en-nb")).read_text("utf-8")
                                    .splitlines()[0])["hypothesis"] for model in ("base", "run/adapted")}
    shown = [block[2] for block in build_blocks(written, "t", set()) if block[0] == "table" and block[1] == TEXT_HEADER]
    assert len(shown) == 2 * 3  # the first three pairs of each direction
    assert shown[3] == [["source", EN[1]], ["reference", NB[1]],
                        ["base", visible(hypotheses["base"])], ["run/adapted", visible(hypotheses["run/adapted"])]]
    markdown = (out / "report.md").read_text("utf-8")
    assert "### Translations: tr/translation, en-nb (the first 3; every one in translations/tr/translation/)" in markdown
    assert f'<td class="text">{EN[1]}</td>' in (out / "report.html").read_text("utf-8")  # text cells, not numbers


def test_copying_the_source_is_the_floor_and_is_scored_like_a_model() -> None:
    task = TranslationTask(kind="translation", path="x", directions=["nb-en", "en-nb"], num_fewshot=1, limit=2)
    floor = copy_source_scores(task, ROWS)
    assert floor["nb-en"] == corpus_scores(NB[1:3], EN[1:3]) and floor["en-nb"] == corpus_scores(EN[1:3], NB[1:3])
    assert 0 < floor["nb-en"]["chrf"] < 100  # shared names and punctuation score, without any translation


def _translated(chrf: dict[str, float], floor: float = 20.0) -> dict:
    return {"models": {"base": {}, "adapted": {}}, "reference": "base",
            "tasks": {"s/tr": {"kind": "translation",
                               **{m: {"nb-en": {"chrf": c, "bleu": 1.0, "pairs": 9}} for m, c in chrf.items()}}},
            "translations": {"s/tr": {"copy_source": {"nb-en": {"chrf": floor, "bleu": 2.0}}}}}


def test_the_report_says_plainly_when_no_model_translates() -> None:
    [line] = translation_verdicts(_translated({"base": 14.2, "adapted": 20.0}))
    assert line.startswith("s/tr: no model translates") and "nb-en 20.0" in line
    [line] = translation_verdicts(_translated({"base": 14.2, "adapted": 31.5}))
    assert "no model" not in line and "adapted in nb-en (chrF 31.5)" in line and "base" not in line


def test_metric_rows_say_which_way_is_better_and_what_a_delta_means() -> None:
    assert [better(m) for m in ("nb-en/chrf", "nb-en/bleu", "accuracy", "ncb/acc", "ncb/exact_match/strict-match",
                                "wikitext/word_perplexity", "bits_per_byte", "mean_margin_nats")] == [
        "higher", "higher", "higher", "higher", "higher", "lower", "lower", None]
    results = {**_translated({"base": 14.2, "adapted": 16.0}), "task_deltas": {"s/tr": {"adapted": {"nb-en/chrf": 1.8}}}}
    header, rows = task_rows(results)
    assert [row[1] for row in rows] == ["nb-en/chrf ↑", "nb-en/bleu ↑"] and rows[0][-1] == "+1.800"
    markdown = render_markdown(results, {}, Path("."), "t")
    assert "chrF and BLEU (0-100, higher is better)" in markdown
    assert "Δ is adapted minus base: a gain is a positive Δ on ↑ rows and a negative Δ on ↓ rows" in markdown
    assert "s/tr: no model translates" in render_html(results, {}, "t")
