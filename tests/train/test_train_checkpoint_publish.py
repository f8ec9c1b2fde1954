"""Crashes inside `Checkpointer._publish`, simulated at each rename: `latest()` still finds a
complete checkpoint (the kill test in test_train_checkpoint_kill.py cannot aim this precisely)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from langadapt.recipe.train import CheckpointConfig
from langadapt.train import checkpoint as ckpt_module
from langadapt.train.checkpoint import Checkpointer, TrainState


class FakeEngine:
    """Writes one file, as an engine's save would."""

    def save(self, directory: Path) -> None:
        (directory / "weights.bin").write_bytes(b"w" * 1024)


class FakeStream:
    def state_dict(self) -> dict:
        return {"position": 0}


class Crash(Exception):
    pass


def _save(root: Path, step: int) -> Path:
    return Checkpointer(root, CheckpointConfig(every_steps=1, keep_last=3)).save(
        TrainState(step=step), FakeEngine(), FakeStream())


@pytest.mark.parametrize("crash_at", [1, 2, 3])
def test_a_crash_at_any_rename_of_a_re_save_leaves_a_complete_latest(
        crash_at: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Re-saving step 2 (the final step after a resume): renames are old->.del, tmp->final, pointer."""
    _save(tmp_path, 1)
    _save(tmp_path, 2)
    calls, real_replace = [], os.replace

    def replace(src: os.PathLike, dst: os.PathLike) -> None:
        calls.append((src, dst))
        if len(calls) == crash_at:
            raise Crash
        real_replace(src, dst)

    monkeypatch.setattr(ckpt_module.os, "replace", replace)
    with pytest.raises(Crash):
        _save(tmp_path, 2)
    monkeypatch.undo()
    found = Checkpointer(tmp_path, CheckpointConfig()).latest()  # a fresh start after the crash
    assert found is not None and found.name in ("step_00000001", "step_00000002")
    assert json.loads((found / "trainer_state.json").read_text())["step"] == int(found.name[5:])
    assert (found / "weights.bin").stat().st_size == 1024
    assert not list(tmp_path.glob("step_*.tmp")) and not list(tmp_path.glob("step_*.del"))  # cleaned at start


def test_a_crash_before_the_first_pointer_write_still_finds_the_checkpoint(tmp_path: Path) -> None:
    _save(tmp_path, 1)
    (tmp_path / "latest").unlink()
    assert Checkpointer(tmp_path, CheckpointConfig()).latest() == tmp_path / "step_00000001"
    assert Checkpointer(tmp_path / "fresh", CheckpointConfig()).latest() is None
