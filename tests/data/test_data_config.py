"""Validation of the data stage's config: messages name the source and the fix."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from langadapt.recipe.data import DataConfig, SourceConfig


def _data(*sources: dict, **extra: object) -> DataConfig:
    return DataConfig.model_validate({"sources": list(sources), **extra})


def test_defaults_and_effective_weight() -> None:
    config = _data({"name": "nb", "path": "x.jsonl", "lang": "nb"}, {"name": "c", "path": "y", "lang": "code", "epochs": 2})
    assert config.sources[0].effective_weight == 1.0
    assert config.sources[1].effective_weight is None
    assert config.valid_fraction == 0.05 and config.on_decode_error == "error"
    assert config.cleaning.exact_dedup and config.cleaning.normalize_nfc


def test_every_field_is_documented() -> None:
    from langadapt.recipe.data import CleaningConfig, FetchConfig

    for model in (SourceConfig, CleaningConfig, DataConfig, FetchConfig):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no docstring"


@pytest.mark.parametrize(
    "sources, extra, message",
    [
        ([{"name": "nb", "path": "a", "lang": "nb"}] * 2, {}, "source name 'nb' is used twice"),
        ([{"name": "a", "path": "a", "lang": "nb", "weight": 0}, {"name": "b", "path": "b", "lang": "nb", "weight": 0}],
         {}, "weights of sources a, b sum to zero"),
        ([{"name": "nb", "path": "a", "lang": "nb", "epochs": 20}], {}, "source nb: 20 epochs is above 16"),
        ([{"name": "nb", "path": "a", "lang": "nb", "epochs": 2, "weight": 1}], {}, "either weight or epochs"),
        ([{"name": "valid", "path": "a", "lang": "nb"}], {}, "not 'valid'"),
        ([{"name": "nb", "path": "a", "lang": "nb", "txt_unt": "line"}], {}, "txt_unt"),
    ],
)
def test_bad_configs_are_refused(sources: list, extra: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _data(*sources, **extra)


def test_force_epochs_allows_more_than_16() -> None:
    config = _data({"name": "nb", "path": "a", "lang": "nb", "epochs": 20}, force_epochs=True)
    assert config.sources[0].epochs == 20


def test_stream_mixture_and_plan_budgets_follow_the_config() -> None:
    from langadapt.data.schedule import plan_mixture
    from langadapt.recipe.data import stream_mixture

    config = _data(
        {"name": "nb", "path": "a", "lang": "nb", "epochs": 6, "unique_tokens": 34e9},
        {"name": "code", "path": "b", "lang": "code", "role": "code", "max_epochs": 1, "unique_tokens": 1e12},
    )
    assert stream_mixture(config) == {"nb": {"epochs": 6}, "code": {"weight": 1.0, "max_epochs": 1}}
    assert stream_mixture(config, roles={"target"}) == {"nb": {"epochs": 6}}
    measured = {"nb": 30e9, "code": 1e12}  # the stream's sizes come from the token shards
    plan = plan_mixture([{"name": name, "unique_tokens": measured[name], **mix}
                         for name, mix in stream_mixture(config).items()], 240e9)
    assert plan.source("nb").tokens == 180e9 and plan.source("code").tokens == 60e9
