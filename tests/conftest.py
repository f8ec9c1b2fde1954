"""Shared fixtures: the ../shared corpus pack and tiny model, skipped cleanly when absent.

With LANGADAPT_TEST_REQUIRE_SHARED=1 (set by .ci/run) a missing pack fails the tests that need it
instead: in CI "skipped" would hide that the end-to-end and golden-loss tests never ran.
"""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path

import pytest
from helpers.shared_data import skip_unless_required
from helpers.tiers import DurationRecorder, add_option, group_for_workers, mark_slow

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def pytest_addoption(parser: pytest.Parser) -> None:
    add_option(parser)


def pytest_configure(config: pytest.Config) -> None:
    if path := config.getoption("--record-durations"):
        config.pluginmanager.register(DurationRecorder(Path(path)), "duration-recorder")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_slow(items)  # the fast tier: -m "not slow" (tests/helpers/tiers.py)
    group_for_workers(items)  # -n 2 --dist loadgroup: one worker per file, the real Slurm's files in one


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """../shared (corpora + tiny-en-llama); tests that need it skip when it is missing."""
    if not (SHARED / "corpora").is_dir():
        skip_unless_required(f"../shared/corpora not found at {SHARED} (CI provides it beside the clone)")
    return SHARED


@pytest.fixture(scope="session")
def tiny_en_llama(shared_dir: Path) -> Path:
    """The 8.6M-parameter English Llama in ../shared/models/tiny-en-llama."""
    path = shared_dir / "models" / "tiny-en-llama"
    if not (path / "config.json").is_file():
        skip_unless_required(f"tiny-en-llama not found at {path}")
    return path


def read_shared_texts(shared_dir: Path, name: str, limit: int | None = None) -> list[str]:
    """Texts of one corpus file, e.g. read_shared_texts(shared_dir, "nb.debian-handbook.valid")."""
    texts = []
    with gzip.open(shared_dir / "corpora" / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            texts.append(json.loads(line)["text"])
            if limit is not None and len(texts) >= limit:
                break
    return texts


@pytest.fixture(scope="session")
def shared_texts(shared_dir: Path):
    """Callable: shared_texts("nb.debian-handbook.valid", limit=None) -> list[str]."""
    return lambda name, limit=None: read_shared_texts(shared_dir, name, limit)


_LOGGER = logging.getLogger("langadapt")
_PRISTINE_LOGGER = (list(_LOGGER.handlers), _LOGGER.propagate, _LOGGER.level)
"""The `langadapt` logger as the test session found it (before any `cli.main`)."""


@pytest.fixture(autouse=True)
def _restore_langadapt_logger():
    """Tests that call `cli.main` in-process install the CLI's console handler (on that test's
    captured stderr, with propagation off); later tests would log into a closed stream and their
    `caplog` would see nothing. After each test the logger is put back as the SESSION found it, not
    as the test found it: a module-scoped fixture that ran `cli.main` before the test began would
    otherwise be what "as found" restores (tests/runtime/test_frontier.py did that)."""
    yield
    handlers, propagate, level = _PRISTINE_LOGGER
    _LOGGER.handlers[:], _LOGGER.propagate = handlers, propagate
    _LOGGER.setLevel(level)
