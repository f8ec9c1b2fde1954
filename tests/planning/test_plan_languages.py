"""`langadapt plan` shows tokens per language and role of each stage (`languages`), so a replay
share (`--set stage2.replay=0.35`) is visible before any data exists."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from langadapt.planning.languages import language_rows, weighted_tokens
from langadapt.planning.recipe_plan import plan_recipe
from langadapt.planning.render import render_plan
from langadapt.recipe import load_recipe

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "recipes" / "tiny_norwegian_warm.yaml"


def _shares(plan: dict, stage: str) -> dict[str, float]:
    return {row["lang"]: row["share"] for row in plan["languages"] if row["stage"] == stage}


def test_plan_json_shows_the_stage2_replay_share() -> None:
    result = subprocess.run([sys.executable, "-m", "langadapt.cli", "plan", str(DEMO), "--set", "stage2.replay=0.35",
                             "--json"], capture_output=True, text=True, cwd=REPO, check=False)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert _shares(plan, "stage2") == pytest.approx({"nb": 0.65, "en": 0.35})
    assert _shares(plan, "stage1") == pytest.approx({"nb": 0.8, "en": 0.2})  # data.replay: 0.2 still
    stage2 = next(s for s in plan["stages"] if s["name"] == "stage2")
    en = next(row for row in plan["languages"] if row["stage"] == "stage2" and row["lang"] == "en")
    assert en["role"] == "replay" and en["tokens"] == pytest.approx(0.35 * stage2["tokens"])


def test_replay_none_reproduces_the_weighted_plan_exactly() -> None:
    """Unset, the weights as written decide; the demo's data.replay: 0.2 is the same plan as its
    old nb/en weights 0.8/0.2, every number of it."""
    weighted = plan_recipe(load_recipe(DEMO, ["data.replay=null", "data.sources[0].weight=0.8",
                                              "data.sources[1].weight=0.2"]).recipe)
    stated = plan_recipe(load_recipe(DEMO).recipe)
    assert stated == weighted
    assert _shares(stated, "stage2") == {"nb": 0.8, "en": 0.2}
    assert [s["tokens"] for s in stated["stages"]] == [60 * 16 * 128, 200 * 16 * 128]


def test_the_text_plan_has_a_language_table() -> None:
    text = render_plan(plan_recipe(load_recipe(DEMO, ["stage2.replay=0.35"]).recipe))
    assert "stage   lang  role    tokens  share" in text
    assert "stage2  en    replay    143k  35.0%" in text


def test_sizes_decide_where_a_source_takes_epochs() -> None:
    assert weighted_tokens({"nb": {"epochs": 2.0}, "en": {"weight": 1.0}}, 100.0) is None
    assert weighted_tokens({"nb": {"weight": 1.0, "max_epochs": 2.0}}, 100.0) is None
    assert weighted_tokens({"nb": {"weight": 3.0}, "en": {"weight": 1.0}, "sv": {"weight": 0.0}}, 100.0) == \
        {"nb": 75.0, "en": 25.0, "sv": 0.0}


def test_rows_group_sources_by_language_and_role_and_drop_untrained_ones() -> None:
    sources = [("hplt", "nb", "target"), ("ncc", "nb", "target"), ("en", "en", "replay"), ("sv", "sv", "replay")]
    rows = language_rows("stage2", {"hplt": 50.0, "ncc": 25.0, "en": 25.0, "sv": 0.0}, sources)
    assert rows == [{"stage": "stage2", "lang": "nb", "role": "target", "tokens": 75.0, "share": 0.75},
                    {"stage": "stage2", "lang": "en", "role": "replay", "tokens": 25.0, "share": 0.25}]


def test_a_max_epochs_cap_that_moves_the_share_gets_a_note(tmp_path: Path) -> None:
    """Sizes known (declared unique_tokens): a capped replay source gives its excess to the target.
    (In a run_root of its own: a demo run finished in this checkout would give measured sizes.)"""
    sets = [f"run_root={tmp_path}", "data.sources[0].unique_tokens=1e6", "data.sources[1].unique_tokens=2000",
            "data.sources[1].max_epochs=1"] + [f"data.sources[{i}].unique_tokens=1000" for i in range(2, 6)]
    plan = plan_recipe(load_recipe(DEMO, sets).recipe)
    assert _shares(plan, "stage2")["en"] < 0.05
    assert any("stage2: data.replay is 0.2 but replay sources get" in note for note in plan["notes"])
