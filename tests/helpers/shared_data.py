"""Skips for missing ../shared data that CI turns into failures (LANGADAPT_TEST_REQUIRE_SHARED=1)."""

from __future__ import annotations

import os

import pytest


def skip_unless_required(reason: str) -> None:
    """Skip for missing shared data, or fail when CI said the data must be there."""
    if os.environ.get("LANGADAPT_TEST_REQUIRE_SHARED") == "1":
        pytest.fail(f"shared test data required (LANGADAPT_TEST_REQUIRE_SHARED=1) but {reason}")
    pytest.skip(reason)
