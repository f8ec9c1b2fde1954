"""A torch profiler trace of chosen steps: `stage.profile_steps`, also through `langadapt launch --set`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers.monitoring import drive

from langadapt.cli import main
from langadapt.recipe.train import TrainStageConfig
from langadapt.train.monitoring.profiler import StepProfiler

REPO = Path(__file__).resolve().parents[2]


def traced_names(out: Path) -> set[str]:
    (trace,) = (out / "profile").glob("*.pt.trace.json")
    return {event.get("name") for event in json.loads(trace.read_text())["traceEvents"]}


@pytest.mark.parametrize("start_step", [0, 3])
def test_only_the_chosen_steps_are_traced_also_after_a_resume(tmp_path: Path, start_step: int) -> None:
    def work(step: int) -> None:
        with torch.profiler.record_function(f"work{step}"):
            torch.randn(32, 32) @ torch.randn(32, 32)

    drive([StepProfiler((3, 5), tmp_path)], range(start_step + 1, 9), 8, work=work)
    names = {n for n in traced_names(tmp_path) if n and n.startswith("work")}
    assert names == ({"work3", "work4", "work5"} if start_step == 0 else {"work4", "work5"})


def test_profile_steps_must_be_an_ordered_range() -> None:
    with pytest.raises(ValueError, match=r"profile_steps \[5, 2\]: need 1 <= first <= last"):
        TrainStageConfig(profile_steps=(5, 2))


def test_launch_set_profile_steps_reaches_every_run_step(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    recipe = REPO / "recipes" / "tiny_norwegian_warm.yaml"
    assert main(["launch", str(recipe), "--slurm", "--set", "stage2.profile_steps=[100,110]", "--out", "p.sbatch"]) == 0
    given = "--set 'stage2.profile_steps=[100,110]'"
    assert (tmp_path / "p.prepare.sbatch").read_text().count(given) == 1  # data..embeddings, the CPU job
    assert (tmp_path / "p.sbatch").read_text().count(given) == 2  # training (srun), then evaluate + export
    assert main(["launch", str(recipe), "--slurm", "--set", "stage2.profile_steps=[9,3]", "--out", "q.sbatch"]) != 0
    assert "profile_steps [9, 3]: need 1 <= first <= last" in capsys.readouterr().err
    assert not (tmp_path / "q.sbatch").exists()
