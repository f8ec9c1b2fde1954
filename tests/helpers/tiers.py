"""The fast tier: tests whose recorded duration is short, for the inner loop (`-m "not slow"`).

`tests/durations.json` holds each test's seconds (setup + call + teardown) from a full run on the
2-core CI machine; a test recorded at `SLOW_SECONDS` or more is marked `slow` at collection, as are
those marked by hand. A test not recorded yet (new) counts as fast until the file is refreshed:

    python -m pytest -q --record-durations tests/durations.json     # the full suite, ~30 min

A module-scoped fixture's cost lands on the first test that uses it, so a slow fixture makes its
first user slow, and the fast tier never pays for it.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

DURATIONS = Path(__file__).resolve().parents[1] / "durations.json"
SLOW_SECONDS = 2.0


def add_option(parser: pytest.Parser) -> None:
    parser.addoption("--record-durations", metavar="PATH", default=None,
                     help="write each test's seconds (setup + call + teardown) to PATH as JSON (the fast tier's input)")


def mark_slow(items: list[pytest.Item]) -> None:
    """Mark `slow` every test recorded at SLOW_SECONDS or more."""
    recorded = json.loads(DURATIONS.read_text(encoding="utf-8")) if DURATIONS.is_file() else {}
    for item in items:
        if recorded.get(item.nodeid, 0.0) >= SLOW_SECONDS:
            item.add_marker(pytest.mark.slow)


class DurationRecorder:
    """Sums each test's phases and writes them when the session ends (a pytest plugin object)."""

    def __init__(self, path: Path) -> None:
        self.path, self.seconds = path, defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] += report.duration

    def pytest_sessionfinish(self) -> None:
        rounded = {nodeid: round(seconds, 2) for nodeid, seconds in sorted(self.seconds.items())}
        self.path.write_text(json.dumps(rounded, indent=0) + "\n", encoding="utf-8")
