"""A full disk is one line naming the path (exit 2), whichever library was writing.

The disk is a real one: a 64 KiB tmpfs mounted in the test's folder (needs root, as in CI;
skipped with the reason otherwise). A /dev/full-style device does not do: safetensors replaces
the file it writes instead of writing into it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from langadapt import cli
from langadapt.errors import LangadaptError
from langadapt.ioerrors import disk_error_line, writing
from langadapt.pipeline import runner as pipeline
from langadapt.recipe.train import CheckpointConfig
from langadapt.train.checkpoint import Checkpointer, TrainState


@pytest.fixture()
def disk(tmp_path: Path) -> Iterator[Path]:
    """A folder on a 64 KiB file system."""
    folder = tmp_path / "disk"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({mounted.stderr.strip()}); CI runs as root")
    yield folder
    subprocess.run(["umount", str(folder)], check=True)


@pytest.fixture()
def full(disk: Path) -> Path:
    """A file path on the small file system."""
    return disk / "weights.bin"


def _fill(path: Path) -> None:
    with open(path, "w") as f:
        f.write("x" * 200_000)


def test_enospc_from_python_names_the_file(full: Path) -> None:
    with pytest.raises(OSError) as err:
        _fill(full)
    line = disk_error_line(err.value)
    assert line is not None and line.startswith(f"{full}: cannot write: no space left on device")


def test_safetensors_error_becomes_one_line_naming_the_path(full: Path) -> None:
    from safetensors.torch import save_file

    with pytest.raises(LangadaptError, match=rf"^checkpoint {full}: cannot write: no space left on device"):
        with writing(full, "checkpoint"):
            save_file({"w": torch.zeros(100_000)}, str(full))


def test_other_errors_pass_through_unchanged(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="a bug"), writing(tmp_path, "checkpoint"):
        raise ValueError("a bug")
    assert disk_error_line(ValueError("a bug")) is None


class _Engine:
    """Writes 400 KB of weights, as a model's save would."""

    def save(self, directory: Path) -> None:
        from safetensors.torch import save_file

        save_file({"w": torch.zeros(100_000)}, str(directory / "model.safetensors"))


class _Stream:
    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


def test_checkpoint_on_a_full_disk_is_one_error_and_never_latest(full: Path) -> None:
    checkpoints = Checkpointer(full.parent / "checkpoints", CheckpointConfig())
    with pytest.raises(LangadaptError, match=r"^checkpoint .*step_00000007\.tmp: cannot write: no space left"):
        checkpoints.save(TrainState(step=7), _Engine(), _Stream())  # type: ignore[arg-type]
    assert checkpoints.latest() is None


def test_cli_prints_one_line_and_exits_2(tmp_path: Path, full: Path, monkeypatch, capsys) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"name: d\nrun_root: {tmp_path}\ninit: scratch\nbase_model: {{architecture: {{model_type: llama}}}}\n"
                      f"data: {{sources: [{{name: nb, path: {recipe}, format: txt, lang: nb}}]}}\n"
                      "tokenizer: {kind: keep_base}\n")
    monkeypatch.setattr(pipeline, "run_pipeline", lambda *a, **k: _fill(full))
    assert cli.main(["run", str(recipe)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"langadapt: error: {full}: cannot write: no space left on device; free space "
                   "(or move run_root) and run again: completed stages and checkpoints are kept"]
    with pytest.raises(OSError):
        cli.main(["--debug", "run", str(recipe)])


# --- input files (issue 23): what a reader opens is a regular file, its compression intact ---
