"""One process, not rank 0 of N: an sbatch batch shell as the pipeline, the logger and the
preflight see it (all three read `runtime.placement`, the one place that decides).

The first cluster submit used to fail here: the batch shell has SLURM_PROCID=0 and
SLURM_NTASKS=16 but is no srun task, and `langadapt run RECIPE --until embeddings` (the command
the multi-rank error recommends) refused to run there as "rank 0 of 16".
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from helpers.recipes import scratch_recipe

from langadapt.recipe import load_recipe
from langadapt.run.fingerprint import hash_json
from langadapt.pipeline.runner import STAGES, Stage, run_pipeline
from langadapt.runtime.logs import setup_logging
from langadapt.runtime.placement import DistInfo, in_slurm_task, training_world_size

JOB = {"SLURM_JOB_ID": "4242", "SLURM_PROCID": "0", "SLURM_NTASKS": "16", "SLURM_NPROCS": "16",
       "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_TASKS_PER_NODE": "8(x2)",
       "SLURM_JOB_NODELIST": "nid[005-006]"}
"""What the batch shell of `sbatch --nodes=2 --ntasks-per-node=8` has (no srun step)."""
SRUN_RANK_9 = {**JOB, "SLURM_STEP_ID": "0", "SLURM_PROCID": "9", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
               "SLURM_STEP_NUM_TASKS": "16", "SLURM_STEP_TASKS_PER_NODE": "8(x2)"}


@pytest.mark.parametrize("step", [None, "4294967291", "batch", "4294967292", "4294967290"])
def test_batch_extern_and_interactive_steps_are_one_process(step: str | None) -> None:
    env = JOB if step is None else {**JOB, "SLURM_STEP_ID": step}
    info = DistInfo.from_env(env)
    assert not in_slurm_task(env)
    assert (info.rank, info.world_size, info.launcher, info.is_main) == (0, 1, "none", True)


def test_an_srun_task_is_rank_k_of_n() -> None:
    info = DistInfo.from_env(SRUN_RANK_9)
    assert (info.rank, info.world_size, info.local_rank, info.node_rank, info.launcher) == (9, 16, 1, 1, "slurm")
    assert not info.is_main


def test_training_world_size_from_each_place() -> None:
    assert training_world_size(64, SRUN_RANK_9) == 16  # a rank: its job's world
    assert training_world_size(64, JOB) == 16  # the batch shell: the tasks its srun will start
    assert training_world_size(64, {}) == 64  # a laptop or login node: the recipe's cluster


@pytest.fixture()
def stub_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[str]]:
    """A recipe whose stages only record that they ran; the environment cleared of launchers."""
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                 "SLURM_STEP_ID", "SLURM_STEPID", *JOB):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "nb.txt").write_text(" ".join(f"ord{i}" for i in range(30)))
    path = tmp_path / "r.yaml"
    path.write_text(scratch_recipe(tmp_path, "stub"))
    calls: list[str] = []

    def fake_table(recipe):
        def make(name):
            def run(ctx):
                (ctx.out / "artifact.txt").write_text(name)
                calls.append(name)
                return {}
            return run
        return [Stage(name, (), make(name)) for name in STAGES]

    monkeypatch.setattr("langadapt.pipeline.runner.stage_table", fake_table)
    monkeypatch.setattr("langadapt.pipeline.runner.fingerprints", lambda loaded, stages, *inputs: {
        s.name: hash_json([loaded.recipe.model_dump(mode="json"), s.name]) for s in stages})
    return path, calls


def test_the_batch_shell_runs_the_single_process_stages(stub_run, monkeypatch: pytest.MonkeyPatch) -> None:
    path, calls = stub_run
    for key, value in JOB.items():
        monkeypatch.setenv(key, value)
    run_pipeline(load_recipe(path), until="embeddings")  # was: "must be complete before a multi-rank launch"
    assert calls == ["data", "tokenizer", "embeddings"]
    layout_root = load_recipe(path).recipe.run_dir
    assert all((layout_root / s / "COMPLETE").exists() for s in calls)  # rank 0's work: marked complete


def test_an_srun_rank_still_refuses_unprepared_stages(stub_run, monkeypatch: pytest.MonkeyPatch) -> None:
    from langadapt.errors import LangadaptError

    path, calls = stub_run
    for key, value in {**SRUN_RANK_9, "SLURM_PROCID": "0"}.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(LangadaptError, match="run `langadapt run RECIPE --until embeddings` in one process"):
        run_pipeline(load_recipe(path))
    assert calls == []


@pytest.mark.parametrize("env, rank", [(JOB, "0"), (SRUN_RANK_9, "9"), ({"RANK": "x", "WORLD_SIZE": "2"}, "?")])
def test_log_lines_name_the_pipelines_rank(env: dict[str, str], rank: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "WORLD_SIZE", "SLURM_STEP_ID", *JOB, *SRUN_RANK_9):
        monkeypatch.delenv(name, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr("sys.stderr.isatty", lambda: False, raising=False)
    setup_logging()
    handler = logging.getLogger("langadapt").handlers[0]
    assert f"[rank {rank}]" in handler.formatter._fmt
