"""LANGADAPT_TEST_REQUIRE_SHARED=1 (set by .ci/run) turns "shared data missing" skips into failures."""

from __future__ import annotations

import pytest
from helpers.shared_data import skip_unless_required


def test_missing_shared_data_skips_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LANGADAPT_TEST_REQUIRE_SHARED", raising=False)
    with pytest.raises(pytest.skip.Exception, match="corpora not found"):
        skip_unless_required("corpora not found")


def test_missing_shared_data_fails_when_ci_requires_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANGADAPT_TEST_REQUIRE_SHARED", "1")
    with pytest.raises(pytest.fail.Exception, match="required .* but corpora not found"):
        skip_unless_required("corpora not found")
