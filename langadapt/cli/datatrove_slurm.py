"""The corpus preparation on datatrove over Slurm, submitted from a login node: the cleaning array,
then the job that merges and runs the CPU stages (`submit_preparation`). The submit.sh of
`langadapt launch --slurm` calls it as `langadapt launch RECIPE --slurm --submit-preparation`.

The steps those jobs run (`CleanPieces`, `FinishPreparation`) are the data stage's
(`data.datatrove_engine`, `data.datatrove_pieces`); loading the recipe, the partitions and the
sbatch options are the launch's, so they live here. Imported only with datatrove installed: the
executor below is datatrove's class, and its jobs import this module by name (datatrove pickles
the executor by reference).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langadapt.data.datatrove_engine import FinishPreparation
from langadapt.data.datatrove_pieces import (
    CleanPieces,
    drop_stale,
    forget_unfinished,
    require_datatrove,
    task_count,
    workspace,
)
from langadapt.data.preparation import plan_jobs
from langadapt.recipe import load_recipe
from langadapt.recipe.cluster import preparation_target


def submit_preparation(recipe_path: str | Path, overrides: list[str] | None = None, until: str = "embeddings",
                       dependency: str | None = None) -> str:
    """Submit the corpus preparation of a recipe as Slurm jobs from a login node; returns the last job's id.

    Two jobs: the cleaning array (`datatrove.tasks` tasks, `datatrove.cpus_per_task` cores each;
    only the unfinished tasks are submitted) and, after it succeeded (`afterok`), one job of
    `datatrove.finish_cpus` cores that runs `langadapt run RECIPE --until <until>` (merge, then the
    stages up to `until`). The GPU job depends on the returned id (`--dependency=afterok:<id>`).
    `dependency` is a job id the cleaning array waits for (`afterok`). The run directory must be on
    a filesystem the nodes share."""
    recipe = Path(recipe_path).resolve()
    overrides = list(overrides or [])
    loaded = load_recipe(recipe, overrides)
    config = loaded.recipe.data
    jobs, _ = plan_jobs(config)
    space = workspace(config, jobs, loaded.recipe.run_dir)
    drop_stale(space)
    tasks = task_count(config, len(jobs))
    forget_unfinished(space, space.clean_logs(tasks), tasks, len(jobs))
    settings = config.datatrove
    name = settings.job_name or loaded.recipe.name
    # Partition and account: cluster.preparation's, the one source (data.datatrove's spellings only
    # where it leaves them unset; the recipe refused any that differ). A failed job cancels the jobs
    # after it (kill-on-invalid-dep) instead of leaving them, and the training job, pending forever.
    target = preparation_target(loaded.recipe.cluster.preparation, settings)
    sbatch_args = {**settings.sbatch_args, "kill-on-invalid-dep": "yes"}
    sbatch_args.pop("partition", None)
    sbatch_args.update({"account": target["account"]} if target["account"] else {})
    common: dict[str, Any] = {
        "time": settings.time, "partition": target["partition"], "mem_per_cpu_gb": settings.mem_per_cpu_gb,
        "env_command": settings.env_command, "sbatch_args": sbatch_args, "qos": None,
        "requeue": False, "mail_type": "NONE",
    }
    clean = _Slurm([CleanPieces(config, jobs, str(space.root), tasks)], tasks=tasks, workers=settings.workers or -1,
                   cpus_per_task=settings.cpus_per_task, job_name=f"{name}-clean",
                   logging_dir=str(space.clean_logs(tasks)), depends_job_id=dependency, **common)
    finish = _Slurm([FinishPreparation(str(recipe), overrides, until)], tasks=1, cpus_per_task=settings.finish_cpus,
                    job_name=f"{name}-prepare", logging_dir=str(space.logs / "finish"), depends=clean,
                    skip_completed=False, **common)
    finish.run()
    return str(finish.job_id)


def _slurm_base() -> type:
    require_datatrove()
    from datatrove.executor import SlurmPipelineExecutor

    return SlurmPipelineExecutor


class _Slurm(_slurm_base()):  # type: ignore[misc]
    """datatrove's Slurm executor without the `#SBATCH --partition` it writes bare when no partition is
    given (sbatch refuses that line); without one the site's default partition runs the jobs."""

    def get_sbatch_args(self, max_array: int = 1) -> dict:
        return {key: value for key, value in super().get_sbatch_args(max_array).items()
                if not (key == "partition" and value is None)}
