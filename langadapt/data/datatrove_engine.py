"""The data stage on datatrove: cleaning as tasks over the corpus's pieces, on one node or a Slurm array.

Why datatrove: FineWeb and FineWeb-2 (Norwegian included) were prepared with it; its executors
run the same pipeline on this node (`LocalPipelineExecutor`) or as Slurm job arrays
(`SlurmPipelineExecutor`, `depends=` between jobs), and its completion markers make a re-run skip
every finished task. We use it for what it does, and keep our own cleaning, so both engines write
the same bytes (tests/data/test_data_datatrove.py):

1. `CleanPieces` (`datatrove_pieces`), task `rank` of `tasks`: `preparation.clean_piece` on a
   contiguous run of the pieces that `preparation.plan_jobs` cuts (the plan never depends on the
   number of tasks), each piece's batches saved to `pieces/<job>.pkl.zst` (pickles in one zstd
   stream; tmp then rename, so a file that exists is whole). A piece whose file exists is not
   cleaned again.
2. One task reads the piece files in job order and calls `merge.merge` (exact and near dedup,
   the held-out split, writing `data/{train,valid}`) and `merge.write_stats`. Locally this is the
   data stage's own process once the cleaning executor returns; on Slurm it is the last job
   (`FinishPreparation`), which runs `langadapt run RECIPE --until <stage>`: the data stage there
   finds every piece cleaned and only merges, the tokenizer stage encodes the token shards on
   that job's cores (`shards.encode_corpus`), and the pipeline writes the manifests and markers
   the GPU job's `langadapt run` then skips.

Near dedup stays in the merge, the in-process MinHash LSH of `cleaning.Deduplicator`: the result is
that of the local engine, bit for bit, and its limit is the same (`NEAR_DEDUP_MAX_DOCUMENTS`, a
located error past it). datatrove's multi-stage MinHash (signatures, buckets, clusters, filter)
would lift the limit but is another estimator (bands of a different size, clusters instead of
first-kept-wins), so its output would differ from the local engine's; not wired here.

The work folder (`.data.datatrove/<key>/` in the run directory, `datatrove_pieces.workspace`) is
keyed by the data section and the plan (files, sizes, modification times), so pieces of other
settings or other files are never merged; its pieces are deleted once the merge succeeded (the
logs stay until the settings change).

This module runs the two steps on this node (`run`) and holds the last job's step
(`FinishPreparation`); what a task does and the files it leaves are `datatrove_pieces`'. Submitting
them to Slurm loads the recipe and picks partitions, which is the launch's work:
`cli.datatrove_slurm.submit_preparation` (`langadapt launch RECIPE --slurm --submit-preparation`).
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

from langadapt.data.datatrove_pieces import (
    CleanPieces,
    Workspace,
    drop_stale,
    first_error,
    forget_unfinished,
    pipeline_step_base,
    quiet_located_errors,
    read_pieces,
    require_datatrove,
    task_count,
    workspace,
)
from langadapt.data.merge import merge, write_stats
from langadapt.data.preparation import Job, plan_jobs, worker_count
from langadapt.errors import LangadaptError
from langadapt.recipe.data import DataConfig, DataSlice
from langadapt.run.context import StageContext
from langadapt.run.timing import PartTimer


def clean_corpus(config: DataConfig, jobs: list[Job], space: Workspace, workers: int) -> int:
    """Step 1 on this node: run every unfinished cleaning task (`LocalPipelineExecutor`); returns the tasks.

    A task marked complete whose pieces are not all on disk (deleted, or from an interrupted run of
    another task count) loses its marker first: the piece files are the truth, the markers a shortcut."""
    require_datatrove()
    from datatrove.executor import LocalPipelineExecutor

    tasks = task_count(config, len(jobs))
    logs = space.clean_logs(tasks)
    forget_unfinished(space, logs, tasks, len(jobs))
    shutil.rmtree(space.root / "errors", ignore_errors=True)
    executor = LocalPipelineExecutor([CleanPieces(config, jobs, str(space.root), tasks)], tasks=tasks,
                                     workers=max(1, min(workers, tasks)), logging_dir=str(logs))
    try:
        executor.run()
    except Exception as err:  # noqa: BLE001 - a task's failure, whatever its type: report the located one
        # A task stopped mid-piece by the failure of another leaves its temporary file: never a piece.
        for partial in space.root.rglob("*.tmp"):
            partial.unlink(missing_ok=True)
        raise first_error(space, len(jobs)) or err from None
    return tasks


def run(slice_: DataSlice, ctx: StageContext) -> dict[str, Any]:
    """The data stage with `engine: datatrove` on this node (`stage.run` dispatches here)."""
    require_datatrove()
    config, parts = slice_.config, PartTimer()
    with parts.measure("plan_pieces"):
        jobs, input_bytes = plan_jobs(config)
    space = workspace(config, jobs, ctx.run_dir)
    drop_stale(space)
    workers = worker_count(config.datatrove.workers, input_bytes)
    with parts.measure("clean_datatrove"):
        tasks = clean_corpus(config, jobs, space, workers)
    with parts.measure("dedup_write"):
        summary, worker_cpu = merge(config, jobs, read_pieces(space, jobs), ctx, workers)
    write_stats(summary, input_bytes, ctx)
    # As large as the cleaned corpus, which the data folder now holds; datatrove's logs (small) stay.
    shutil.rmtree(space.root / "pieces", ignore_errors=True)
    parts_ = {**parts.as_dict(), "workers_clean": {"cpu_s": round(worker_cpu, 2)}}
    return {**summary, "run": {"engine": "datatrove", "tasks": tasks, "workers": workers, "parts": parts_}}


class FinishPreparation(pipeline_step_base()):  # type: ignore[misc]
    """Step 2 on Slurm: `langadapt run RECIPE --until <stage>` in the last job, after every cleaning task.

    The CLI in a subprocess, not the pipeline in this one: its logging, its one-line errors and its
    exit code are what a user reads in the job's log, the same as in a local run."""

    name = "finish preparation"
    type = "langadapt"

    def __init__(self, recipe: str, overrides: list[str], until: str) -> None:
        super().__init__()
        self.recipe, self.overrides, self.until = recipe, overrides, until

    def run(self, data: Any, rank: int = 0, world_size: int = 1) -> Iterator[Any]:
        from loguru import logger

        logger.configure(patcher=quiet_located_errors)
        command = [*_langadapt_command(), "run", self.recipe, "--until", self.until,
                   *(part for item in [*self.overrides, "data.engine=datatrove"] for part in ("--set", item))]
        logger.info("running " + " ".join(shlex.quote(part) for part in command))
        done = subprocess.run(command, check=False)
        if done.returncode != 0:
            raise LangadaptError(f"preparation: `langadapt run {self.recipe} --until {self.until}` failed "
                                 f"(exit code {done.returncode}); its error is above in this job's log")
        yield from ()


def _langadapt_command() -> list[str]:
    """This interpreter's langadapt (the job may not have it on PATH under that name)."""
    return [sys.executable, "-c", "import sys; from langadapt.cli import main; sys.exit(main())"]


if __name__ == "__main__":
    # `python -m langadapt.data.datatrove_engine submit RECIPE [...]`, which the submit.sh of an earlier
    # `langadapt launch --slurm` runs: forwarded to `langadapt launch RECIPE --slurm --submit-preparation`
    # (cli.datatrove_slurm), the one submission. exec, not an import: the data package stays below the CLI.
    import os

    if sys.argv[1:2] != ["submit"]:
        print("usage: python -m langadapt.data.datatrove_engine submit RECIPE [--set KEY=VALUE ...] "
              "[--until STAGE] [--dependency JOB_ID]", file=sys.stderr)
        sys.exit(2)
    os.execv(sys.executable, [sys.executable, "-m", "langadapt.cli", "launch", *sys.argv[2:], "--slurm",
                              "--submit-preparation"])
