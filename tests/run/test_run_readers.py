"""The one reader of each run file other code reads back: a stage's manifest.json
(`run.layout.read_manifest`) and a training stage's metrics.jsonl (`run.metrics_log`).

The metrics file is checked against what its writer (`train.monitoring.metrics.MetricsFile`) does
at a resume: it keeps the rows up to the checkpoint and logs the steps after it again, so the
reader counts each step once, the last record winning.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from langadapt.run import completion
from langadapt.run.layout import MARKER, RunLayout, read_manifest
from langadapt.run.metrics_log import kept_lines, parse_row, read_metrics


def _write(path: Path, rows: list[dict | str]) -> Path:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows),
                    encoding="utf-8")
    return path


def test_train_and_validation_rows_are_read_apart_in_step_order_the_last_record_of_a_step_winning(
        tmp_path: Path) -> None:
    path = _write(tmp_path / "metrics.jsonl", [
        {"step": 1, "loss": 4.0}, {"step": 2, "loss": 3.9}, {"step": 2, "valid": {"nb": {"loss": 3.8}}},
        {"step": 3, "loss": 3.5},  # logged before a kill; the resume logs step 3 again
        '{"step": 4, "lo',  # cut short by the kill
        {"step": 3, "loss": 3.6}, {"step": 3, "valid": {"nb": {"loss": 3.7}}}, [1, 2], {"no_step": 1},
    ])
    train, valid = read_metrics(path)
    assert [(row["step"], row["loss"]) for row in train] == [(1, 4.0), (2, 3.9), (3, 3.6)]
    assert [row["step"] for row in valid] == [2, 3]
    assert read_metrics(tmp_path / "missing.jsonl") == ([], [])


def test_a_resume_keeps_the_lines_up_to_its_checkpoint_as_written(tmp_path: Path) -> None:
    lines = ['{"step": 1, "loss": 4.0}', '{"step": 2, "valid": {}}', '{"step": 3, "loss": 3.5}',
             '{"step": 4, "lo']
    path = _write(tmp_path / "metrics.jsonl", list(lines))
    assert kept_lines(path, 2) == lines[:2]
    assert kept_lines(path, 10) == lines[:3]  # the cut-short line counts as never written
    assert kept_lines(tmp_path / "missing.jsonl", 2) == []
    assert parse_row('{"step": 4, "lo') is None and parse_row('{"loss": 1.0}') is None


def test_the_writer_and_the_reader_agree_on_a_resumed_stage(tmp_path: Path) -> None:
    """MetricsFile resumed at step 2 keeps steps 1-2 and appends 3-4: every step once, the resume's rows."""
    from langadapt.train.monitoring.metrics import MetricsFile

    path = _write(tmp_path / "metrics.jsonl", [{"step": s, "loss": 9.0} for s in (1, 2, 3)] + ['{"step": 4'])

    class Start:
        step = 2

    writer = MetricsFile(path)
    writer.on_stage_start(Start())  # type: ignore[arg-type]
    for step in (3, 4):
        writer.on_log({"step": step, "loss": 1.0})
    writer.close()
    rows = read_metrics(path).train
    assert [(row["step"], row["loss"]) for row in rows] == [(1, 9.0), (2, 9.0), (3, 1.0), (4, 1.0)]
    assert len(path.read_text().splitlines()) == 4


@pytest.mark.parametrize("text", [None, "", "{not json", "[1, 2]"], ids=["missing", "empty", "cut", "list"])
def test_a_missing_or_broken_manifest_reads_as_empty(tmp_path: Path, text: str | None) -> None:
    layout = RunLayout(tmp_path)
    layout.stage_dir("stage2").mkdir()
    if text is not None:
        layout.manifest("stage2").write_text(text)
    (layout.stage_dir("stage2") / MARKER).write_text("done\n")
    assert read_manifest(layout.stage_dir("stage2")) == {}
    assert layout.stage_summary("stage2") == {}
    assert completion.is_complete(layout.stage_dir("stage2"))  # the marker alone
    assert not completion.is_complete(layout.stage_dir("stage2"), "abc")  # no fingerprint to match


def test_a_written_manifest_reads_back_whole(tmp_path: Path) -> None:
    layout = RunLayout(tmp_path)
    layout.stage_dir("export").mkdir()
    manifest = {"stage": "export", "fingerprint": "abc", "wall_seconds": 1.5,
                "summary": {"files": {"a": "1"}}}
    completion.write_manifest(layout.stage_dir("export"), manifest)
    assert read_manifest(layout.stage_dir("export")) == manifest
    assert layout.stage_summary("export") == {"files": {"a": "1"}}
    assert completion.is_complete(layout.stage_dir("export"), "abc")
    assert not completion.is_complete(layout.stage_dir("export"), "abd")
