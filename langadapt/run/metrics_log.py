"""A training stage's metrics.jsonl: the one parser of its rows, and what a resume keeps of it.

`train.monitoring.metrics.MetricsFile` (rank 0) appends one JSON object a line, flushed per row:
train rows (`loss`, `tokens`, `tokens_per_second`, ...) and validation rows (`valid`), each with
its `step`; a validation row shares its step with that step's train row. A kill loses at most the
line being written, and a line cut short counts as never written. A resumed stage keeps the rows
up to its checkpoint (`kept_lines`) and logs the steps after it again, so a step recorded twice was
rewritten: the last record of a step wins (`read_metrics`), and no step counts twice.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple


class MetricsRows(NamedTuple):
    """A metrics.jsonl's rows by kind, each in step order, one per step."""

    train: list[dict]
    valid: list[dict]


def parse_row(line: str) -> dict | None:
    """A metrics.jsonl row, or None for a line cut short by a kill (or anything else without a step)."""
    try:
        row = json.loads(line)
    except ValueError:
        return None
    return row if isinstance(row, dict) and "step" in row else None


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.is_file() else []


def kept_lines(path: Path, step: int) -> list[str]:
    """The lines a stage resumed at checkpoint `step` keeps, as written: the rows up to `step`
    (those after it are logged again; a cut-short line is dropped)."""
    return [line for line in _lines(path) if (row := parse_row(line)) is not None and row["step"] <= step]


def read_metrics(path: Path) -> MetricsRows:
    """(train rows, validation rows) of a metrics.jsonl, by step, the last record of a step winning
    (a resumed stage's rewrite); a missing file has none."""
    train: dict[float, dict] = {}
    valid: dict[float, dict] = {}
    for line in _lines(Path(path)):
        if (row := parse_row(line)) is not None:
            (valid if isinstance(row.get("valid"), dict) else train)[row["step"]] = row
    return MetricsRows([train[s] for s in sorted(train)], [valid[s] for s in sorted(valid)])
