"""The fast tier: tests whose recorded duration is short, for the inner loop (`-m "not slow"`), and
the groups that keep the parallel run (`-n 2`, pytest-xdist) right.

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


SHARED_SERVICE_FIXTURES = {"slurm": "real-slurm"}
"""Fixtures that start or use one service of the machine, and the group whose files run one after
another in one worker: two workers starting the single-node Slurm, or queueing jobs on its two
CPUs, would wait on each other past the tests' timeouts."""


def group_for_workers(items: list[pytest.Item]) -> None:
    """One `xdist_group` per test file (module-scoped fixtures, the costly end-to-end runs, are
    built once, in one worker: what `--dist loadfile` does), with every file that uses a shared
    service in that service's group. Under `-n N --dist loadgroup` (the README's command); without
    xdist the marks are inert."""
    by_file: dict[str, list[pytest.Item]] = defaultdict(list)
    for item in items:
        by_file[item.nodeid.split("::")[0]].append(item)
    for path, file_items in by_file.items():
        services = {SHARED_SERVICE_FIXTURES[f] for item in file_items for f in getattr(item, "fixturenames", ())
                    if f in SHARED_SERVICE_FIXTURES}
        group = min(services) if services else path
        for item in file_items:
            item.add_marker(pytest.mark.xdist_group(group))
