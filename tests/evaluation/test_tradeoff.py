"""Gain and forgetting (issue 24 item 4): one pure function over the results dict, the first table of
every report and model card, and the Pareto front the frontier command draws from it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from langadapt.evaluation.render import render_html, render_markdown
from langadapt.evaluation.report import write_report
from langadapt.evaluation.tradeoff import pareto, target_langs, tradeoff, tradeoffs
from langadapt.export.card import Exported, build_card, tradeoff_text
from langadapt.export.provenance import RunFacts
from langadapt.recipe.export import ExportConfig
from langadapt.run.layout import RunLayout


def results(**adapted: float) -> dict:
    """A run's results: base and adapted bits per byte per language (nb the target, as the demo)."""
    base = {"nb": 5.0, "nn": 4.0, "en": 2.0, "sv": 3.0, "code": 1.0}
    adapted = {"nb": 1.845, "nn": 3.0, "en": 2.432, "sv": 3.3, "code": 1.05, **adapted}
    models = {"base": {k: {"bits_per_byte": v} for k, v in base.items()},
              "adapted": {k: {"bits_per_byte": v} for k, v in adapted.items()}}
    return {"models": models, "reference": "base", "target_langs": ["nb"], "deltas": {},
            "suites": {"monolingual": {"langs": ["nb", "nn"]}, "multilingual": {"langs": ["en", "sv", "code"]}}}


def test_target_gain_and_the_largest_forgetting_with_their_languages() -> None:
    found = tradeoff(results())
    assert found.model == "adapted" and found.reference == "base"
    assert found.target_lang == "nb" and found.target_change == pytest.approx(1.845 / 5 - 1)  # -63.1%
    assert found.gain == pytest.approx(0.631)  # positive when the target got better
    # en rose 21.6%, sv 10%, code 5%; nn (a neighbour) improved: the largest forgetting is en
    assert found.forgetting_lang == "en" and found.forgetting == pytest.approx(0.216)
    assert found.headline() == "target nb: -63.1% bpb vs base; largest forgetting: en +21.6%"


def test_a_neighbour_can_be_the_one_most_forgotten() -> None:
    found = tradeoff(results(sv=3.9))  # +30%, more than en's +21.6%
    assert (found.forgetting_lang, round(found.forgetting, 3)) == ("sv", 0.3)


def test_when_everything_improved_it_is_no_forgetting_not_the_largest() -> None:
    """Issue 38: the worst other language still gives the number (code, the least gain), but a fall
    is never called forgetting, in the headline or in the table."""
    found = tradeoff(results(en=1.9, sv=2.7, code=0.99))
    assert found.forgetting_lang == "code" and found.forgetting == pytest.approx(-0.01)
    assert not found.forgot
    assert found.headline().endswith("; no forgetting: no other language got worse (least gain: code -1.0%)")
    assert "largest forgetting" not in found.headline()
    assert found.table()[1][1] == ["no forgetting (least gain)", "code", "-1.0%"]
    assert tradeoff(results()).table()[1][1][0] == "largest forgetting"


def test_several_targets_report_the_one_that_gained_least() -> None:
    tree = {**results(), "target_langs": ["nb", "nn"]}
    found = tradeoff(tree)
    assert found.target_lang == "nn" and found.target_change == pytest.approx(-0.25)
    assert found.forgetting_lang == "en"  # nn is no longer on the forgetting side
    assert "target nn (least gain of nb, nn): -25.0% bpb vs base" in found.headline()


def test_without_recorded_targets_the_first_suite_language_is_the_target() -> None:
    tree = results()
    del tree["target_langs"]
    assert target_langs(tree) == ["nb"]
    assert tradeoff(tree).target_lang == "nb"


def test_nothing_to_compare_is_none() -> None:
    assert tradeoff(results(), model="base") is None
    assert tradeoff({**results(), "target_langs": ["se"]}) is None  # target not scored
    only_target = results()
    for per in only_target["models"].values():
        per.pop("nn"), per.pop("en"), per.pop("sv"), per.pop("code")
    found = tradeoff(only_target)
    assert found.forgetting_lang is None and found.headline().endswith("no other language scored")
    assert set(tradeoffs(results())) == {"adapted"}


def first_table(markdown: str) -> str:
    """The first Markdown table (its consecutive `|` lines)."""
    return re.search(r"(^\|.*\n)+", markdown, re.MULTILINE).group(0)


def test_the_report_leads_with_both_sides(tmp_path: Path) -> None:
    tree = results()
    markdown = render_markdown(tree, {}, tmp_path, "t")
    table = first_table(markdown)
    assert "| target gain | nb | -63.1% |" in table and "| largest forgetting | en | +21.6% |" in table
    assert markdown.index("target nb: -63.1% bpb vs base; largest forgetting: en +21.6%") < markdown.index("|")
    html = render_html(tree, {}, "t")
    first = html[html.index("<table>"):html.index("</table>")]
    assert "<td>target gain</td><td>nb</td><td>-63.1%</td>" in first
    assert "<td>largest forgetting</td><td>en</td><td>+21.6%</td>" in first


def test_results_json_keeps_it_and_the_card_leads_with_it(tmp_path: Path) -> None:
    layout = RunLayout(tmp_path / "run")
    paths = write_report(results(), layout.evaluate)
    saved = json.loads(paths["results"].read_text())
    assert saved["tradeoff"]["adapted"]["headline"] == "target nb: -63.1% bpb vs base; largest forgetting: en +21.6%"
    assert saved["tradeoff"]["adapted"]["forgetting_lang"] == "en"
    facts = RunFacts(init="warm", base_hub_id=None, base_label="base", target_languages=("nb",), sources=())
    card = str(build_card(layout, facts, ExportConfig(), Exported("adapted", ("stage2",), {})))
    table = first_table(card)
    assert "| target gain | nb | -63.1% |" in table and "| largest forgetting | en | +21.6% |" in table
    assert "not evaluated" not in tradeoff_text(saved, "adapted")
    assert "no gain-and-forgetting summary" in tradeoff_text(saved, "stage2-step50")


def test_pareto_keeps_what_nothing_beats() -> None:
    # (forgetting, gain): less forgetting and more gain are better
    points = [(0.216, 0.631), (-0.002, 0.612), (0.10, 0.60), (0.30, 0.70), (0.30, 0.65), (-0.002, 0.612)]
    assert pareto(points) == [True, True, False, True, False, True]  # equal points both stay
    assert pareto([]) == [] and pareto([(0.0, 0.0)]) == [True]


@pytest.mark.parametrize(("init_en", "said"), [(2.8, "training won back 18.4 points"),
                                               (2.2, "training forgot 11.6 points more")])
def test_the_report_says_what_the_tokenizer_cost_before_training(init_en: float, said: str, tmp_path: Path) -> None:
    """The step-0 English cost of the tokenizer change apart from what training forgot (issue 40 item 4)."""
    from langadapt.evaluation.tradeoff import forgetting_origin

    tree = results()  # en: base 2.0, adapted 2.432 (+21.6%)
    tree["models"]["init"] = {"nb": {"bits_per_byte": 3.0}, "en": {"bits_per_byte": init_en}}
    line = forgetting_origin(tree, tradeoff(tree, "adapted"))
    assert line == (f"en vs base: {init_en / 2 - 1:+.1%} at step 0 (the tokenizer change and the new rows, before any "
                    f"training: the init model), +21.6% for adapted: {said}.")
    assert line in render_markdown(tree, {}, tmp_path, "t")
    assert forgetting_origin(results(), tradeoff(results(), "adapted")) is None  # no step-0 model: nothing said
