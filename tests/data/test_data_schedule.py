"""Repetition maths against Muennighoff et al. 2023 and the budget rules of plan_mixture."""

from __future__ import annotations

import math

import pytest

from langadapt.data.schedule import R_D_STAR, SourceBudget, effective_data, effective_ratio, plan_mixture
from langadapt.errors import LangadaptError


@pytest.mark.parametrize("epochs, ratio", [(2, 0.984), (4, 0.931), (8, 0.828), (16, 0.661)])
def test_effective_ratio_matches_published_numbers(epochs: float, ratio: float) -> None:
    assert effective_ratio(epochs) == pytest.approx(ratio, abs=1e-3)


def test_effective_data_formula_and_no_discount_below_one_epoch() -> None:
    unique = 34e9
    assert effective_data(unique, 0.5 * unique) == 0.5 * unique
    assert effective_data(unique, unique) == unique
    six = effective_data(unique, 6 * unique)
    assert six == pytest.approx(unique + unique * R_D_STAR * (1 - math.exp(-5 / R_D_STAR)))
    # The value of repeats saturates at U * (1 + R_D*) however long one trains.
    assert effective_data(1.0, 1e6) == pytest.approx(1 + R_D_STAR, rel=1e-6)
    with pytest.raises(ValueError):
        effective_data(0, 10)


def test_normistral_warm_mix_epochs_sources_take_their_share_first() -> None:
    plan = plan_mixture(
        [SourceBudget("no", 34e9, epochs=6), {"name": "code", "unique_tokens": 1e12, "weight": 1.0}], 260e9
    )
    no, code = plan.source("no"), plan.source("code")
    assert no.tokens == pytest.approx(204e9) and no.epochs == pytest.approx(6)
    assert code.tokens == pytest.approx(56e9)
    assert no.effective_ratio == pytest.approx(effective_ratio(6))
    assert plan.effective_tokens == pytest.approx(no.effective_tokens + 56e9)
    assert any("no: 6.0 epochs" in w for w in plan.warnings)
    assert plan.to_dict()["sources"][0]["name"] == "no"


def test_weights_split_the_rest_and_max_epochs_water_fills() -> None:
    plan = plan_mixture(
        [
            {"name": "a", "unique_tokens": 10, "weight": 1, "max_epochs": 2},
            {"name": "b", "unique_tokens": 1000, "weight": 1},
            {"name": "c", "unique_tokens": 1000, "weight": 3},
        ],
        420,
    )
    assert plan.source("a").tokens == pytest.approx(20)  # capped at 2 epochs
    assert plan.source("b").tokens == pytest.approx(100)  # the other 400 split 1:3
    assert plan.source("c").tokens == pytest.approx(300)
    assert sum(s.share for s in plan.sources) == pytest.approx(1)
    assert plan.warnings == []


def test_more_than_16_epochs_is_refused_unless_forced() -> None:
    sources = [{"name": "tiny", "unique_tokens": 1e6, "weight": 1}]
    with pytest.raises(LangadaptError, match=r"source tiny: 20\.0 epochs is above 16"):
        plan_mixture(sources, 20e6)
    plan = plan_mixture(sources, 20e6, force=True)
    assert plan.source("tiny").epochs == pytest.approx(20)
    assert plan.source("tiny").effective_ratio < 0.6


def test_bad_budgets_name_the_sources() -> None:
    with pytest.raises(LangadaptError, match="weights of sources a, b sum to zero"):
        plan_mixture([{"name": "a", "unique_tokens": 5, "weight": 0}, {"name": "b", "unique_tokens": 5, "weight": 0}], 8)
    with pytest.raises(LangadaptError, match="fixed epochs need"):
        plan_mixture([{"name": "a", "unique_tokens": 100, "epochs": 3}], 200)
    with pytest.raises(LangadaptError, match="fill only 200 of 300 tokens and no source has a weight"):
        plan_mixture([{"name": "a", "unique_tokens": 100, "epochs": 2}], 300)
    with pytest.raises(LangadaptError, match="source a: unknown or zero size"):
        plan_mixture([{"name": "a", "unique_tokens": None, "weight": 1}], 200)
    with pytest.raises(LangadaptError, match="max_epochs of every weighted source"):
        plan_mixture([{"name": "a", "unique_tokens": 10, "weight": 1, "max_epochs": 2}], 100)
