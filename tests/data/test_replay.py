"""The replay share (`data.replay`, `stageN.replay`): one pure function turns it into the weights the
stream already understands; training, plan and preflight all get them from `stage_mixture`."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.shards import BASE, make_shards

from langadapt.errors import LangadaptError
from langadapt.recipe import load_recipe
from langadapt.recipe.data import DataConfig, stream_mixture
from langadapt.recipe.replay import replay_mixture, stage_mixture, stage_replay
from langadapt.recipe.train import TrainStageConfig

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "recipes" / "tiny_norwegian_warm.yaml"
ROLES = {"nb": "target", "nn": "target", "code": "code", "en": "replay", "sv": "replay", "fi": "replay"}
ENTRIES = {"nb": {"weight": 3.0}, "nn": {"weight": 1.0}, "code": {"weight": 1.0, "max_epochs": 1.0},
           "en": {"weight": 2.0}, "sv": {"weight": 1.0}, "fi": {"weight": 0.0}}


def test_the_share_goes_to_the_replay_sources_split_by_their_weights() -> None:
    mixed = replay_mixture(ENTRIES, ROLES, 0.3)
    weights = {name: entry["weight"] for name, entry in mixed.items()}
    assert weights == pytest.approx({"nb": 0.7 * 3 / 5, "nn": 0.7 / 5, "code": 0.7 / 5,
                                     "en": 0.3 * 2 / 3, "sv": 0.3 / 3, "fi": 0.0})
    assert sum(weights.values()) == pytest.approx(1.0)
    assert mixed["code"]["max_epochs"] == 1.0  # a cap is kept (plan notes where it moves the share)
    assert ENTRIES["nb"] == {"weight": 3.0}  # pure: the input is not touched


def test_share_zero_drops_replay_and_keeps_the_rest() -> None:
    weights = {n: e["weight"] for n, e in replay_mixture(ENTRIES, ROLES, 0.0).items()}
    assert weights["en"] == weights["sv"] == weights["fi"] == 0.0
    assert weights["nb"] == pytest.approx(0.6)


@pytest.mark.parametrize("entries, share, match", [
    ({"nb": {"weight": 1.0}, "en": {"weight": 1.0}}, 1.2, r"stage2\.replay: 1\.2 is not a share"),
    ({"nb": {"weight": 1.0}, "en": {"weight": 1.0}}, -0.1, r"stage2\.replay: -0\.1 is not a share"),
    ({"nb": {"epochs": 2.0}, "en": {"weight": 1.0}}, 0.2, r"stage2\.replay: source nb sets epochs"),
    ({"nb": {"max_epochs": 2.0}, "en": {"weight": 1.0}}, 0.2, r"source nb has neither weight nor epochs"),
    ({"nb": {"weight": 1.0}, "en": {"weight": 0.0}}, 0.2, r"no role: replay source has weight > 0"),
    ({"nb": {"weight": 0.0}, "en": {"weight": 1.0}}, 0.2, r"no target or code source has weight > 0"),
])
def test_a_share_the_sources_cannot_give_is_refused_naming_the_key(entries: dict, share: float, match: str) -> None:
    with pytest.raises(LangadaptError, match=match):
        replay_mixture(entries, ROLES, share, "stage2.replay")


def _data(replay: float | None = None) -> DataConfig:
    return DataConfig(replay=replay, sources=[
        {"name": "nb", "path": "x", "lang": "nb", "weight": 0.5},
        {"name": "code", "path": "y", "lang": "code", "role": "code", "weight": 0.5},
        {"name": "en", "path": "z", "lang": "en", "role": "replay"},
        {"name": "sv", "path": "w", "lang": "sv", "role": "replay", "weight": 0},
    ])


def test_stage_mixture_none_is_the_weights_as_written() -> None:
    data, stage = _data(), TrainStageConfig(mixture={"nb": {"weight": 2}})
    assert stage_replay(data, "stage1", stage) == (None, "data.replay")
    assert stage_mixture(data, "stage1", stage) == stream_mixture(data, stage.mixture)


def test_a_stage_share_overrides_data_replay_after_the_stage_mixture() -> None:
    data = _data(replay=0.2)
    stage = TrainStageConfig(mixture={"nb": {"weight": 3}, "code": {"weight": 1}}, replay=0.4)
    assert stage_replay(data, "stage2", stage) == (0.4, "stage2.replay")
    weights = {n: e["weight"] for n, e in stage_mixture(data, "stage2", stage).items()}
    assert weights == pytest.approx({"nb": 0.45, "code": 0.15, "en": 0.4, "sv": 0.0})
    default = {n: e["weight"] for n, e in stage_mixture(data, "stage1", TrainStageConfig()).items()}
    assert default == pytest.approx({"nb": 0.4, "code": 0.4, "en": 0.2, "sv": 0.0})


def test_the_demo_share_is_the_mixture_its_old_weights_gave() -> None:
    """recipes/tiny_norwegian_warm.yaml states data.replay: 0.2 where it had nb/en weights 0.8/0.2:
    training streams exactly the same weights, so its golden numbers stay valid."""
    stated = load_recipe(DEMO).recipe
    weighted = load_recipe(DEMO, ["data.replay=null", "data.sources[0].weight=0.8",
                                  "data.sources[1].weight=0.2"]).recipe
    for name in ("stage1", "stage2"):
        assert stage_mixture(stated.data, name, getattr(stated, name)) == \
            stage_mixture(weighted.data, name, getattr(weighted, name))
    assert stage_mixture(stated.data, "stage2", stated.stage2)["en.debian-handbook"] == {"weight": 0.2}


def test_the_stream_built_from_the_stage_mixture_draws_the_share(tmp_path: Path) -> None:
    from langadapt.data.stream import build_stream

    recipe = load_recipe(DEMO, ["stage2.replay=0.35"]).recipe
    mixture = stage_mixture(recipe.data, "stage2", recipe.stage2)
    trained = {name: entry for name, entry in mixture.items() if entry["weight"] > 0}
    shards = make_shards(tmp_path, {name: 50_001 for name in trained})  # sorted: en is source 0
    stream = build_stream(shards, trained, seq_len=8, total_samples=400, seed=0)
    rows = stream.next_batch(400)
    english = int((rows[:, 0] // BASE == 0).sum())
    assert english == 140  # 0.35 of 400 samples


@pytest.mark.parametrize("sets, key, what", [
    (["stage2.replay=1.2"], "stage2.replay", "less than 1"),
    (["stage2.replay=-0.1"], "stage2.replay", "greater than or equal to 0"),
    (["data.replay=1.2"], "data.replay", "less than 1"),
    (["data.sources[1].weight=0"], "data.replay", "no role: replay source has weight > 0"),
    (["stage1.replay=0.3", "stage1.mixture={nb.debian-handbook: {epochs: 1}}"], "stage1.replay",
     "source nb.debian-handbook sets epochs"),
])
def test_a_bad_share_is_one_line_naming_the_key(sets: list[str], key: str, what: str) -> None:
    with pytest.raises(LangadaptError) as caught:
        load_recipe(DEMO, sets)
    message = str(caught.value)
    assert "\n" not in message and f"{key}: " in message and what in message


def test_stage2_does_not_inherit_stage1_replay() -> None:
    """Like `mixture`, the share belongs to the stage: stage 2 falls back to data.replay instead."""
    loaded = load_recipe(DEMO, ["stage1.replay=0.05"])
    assert loaded.recipe.stage1.replay == 0.05 and loaded.recipe.stage2.replay is None
    assert "replay" not in loaded.inheritance["inherited"]
