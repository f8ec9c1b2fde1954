"""The data stage on datatrove: cleaning as tasks over the corpus's pieces, on one node or a Slurm array.

Why datatrove: FineWeb and FineWeb-2 (Norwegian included) were prepared with it; its executors
run the same pipeline on this node (`LocalPipelineExecutor`) or as Slurm job arrays
(`SlurmPipelineExecutor`, `depends=` between jobs), and its completion markers make a re-run skip
every finished task. We use it for what it does, and keep our own cleaning, so both engines write
the same bytes (tests/data/test_data_datatrove.py):

1. `CleanPieces`, task `rank` of `tasks`: `preparation.clean_piece` on a contiguous run of the pieces
   that `preparation.plan_jobs` cuts (the plan never depends on the number of tasks), each piece's
   batches saved to `pieces/<job>.pkl.zst` (pickles in one zstd stream; tmp then rename, so a
   file that exists is whole). A piece whose file exists is not cleaned again.
2. One task reads the piece files in job order and calls `merge.merge` (exact and near dedup,
   the held-out split, writing `data/{train,valid}`) and `merge.write_stats`. Locally this is the
   data stage's own process once the cleaning executor returns; on Slurm it is the last job,
   which runs `langadapt run RECIPE --until <stage>` (`submit_preparation`): the data stage there
   finds every piece cleaned and only merges, the tokenizer stage encodes the token shards on
   that job's cores (`shards.encode_corpus`), and the pipeline writes the manifests and markers
   the GPU job's `langadapt run` then skips.

Near dedup stays in the merge, the in-process MinHash LSH of `cleaning.Deduplicator`: the result is
that of the local engine, bit for bit, and its limit is the same (`NEAR_DEDUP_MAX_DOCUMENTS`, a
located error past it). datatrove's multi-stage MinHash (signatures, buckets, clusters, filter)
would lift the limit but is another estimator (bands of a different size, clusters instead of
first-kept-wins), so its output would differ from the local engine's; not wired here.

The work folder (`.data.datatrove/<key>/` in the run directory) is keyed by the data section and
the plan (files, sizes, modification times), so pieces of other settings or other files are never
merged; its pieces are deleted once the merge succeeded (the logs stay until the settings change).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langadapt.data.merge import merge, write_stats
from langadapt.data.preparation import Cleaned, Job, clean_piece, init_worker, plan_jobs, worker_count
from langadapt.errors import LangadaptError
from langadapt.recipe.data import DataConfig, DataSlice
from langadapt.run.context import StageContext
from langadapt.run.timing import PartTimer

WORK_FOLDER = ".data.datatrove"
"""The engine's folder in the run directory: cleaned pieces and datatrove's logs and markers."""
MAX_TASKS = 1000
"""Default ceiling on cleaning tasks: a Slurm array's usual `MaxArraySize` is 1001."""
_INSTALL = "data.engine: datatrove needs datatrove: pip install 'langadapt[prep]'"


def _require_datatrove() -> None:
    try:
        import datatrove  # noqa: F401
    except ImportError:
        raise LangadaptError(_INSTALL) from None


@dataclass(frozen=True)
class Workspace:
    """Where one plan's pieces and datatrove's bookkeeping live (`root`, on a filesystem every task sees)."""

    root: Path
    logs: Path

    def piece(self, job: int) -> Path:
        return self.root / "pieces" / f"{job:06d}.pkl.zst"

    def error(self, job: int) -> Path:
        """A failed piece's message, so that the parent reports the task's own located error."""
        return self.root / "errors" / f"{job:06d}.txt"

    def clean_logs(self, tasks: int) -> Path:
        """datatrove's logging folder of the cleaning step; per task count, as a rank means a run of pieces of it."""
        return self.logs / f"clean-{tasks}"


def workspace(config: DataConfig, jobs: list[Job], run_dir: Path) -> Workspace:
    """The work folder of this data section and plan, under the run directory (or `datatrove.logging_dir`)."""
    dumped = config.model_dump(mode="json", exclude={"engine", "datatrove", "num_workers"})
    files = sorted({job.piece.path for job in jobs})
    plan = [[job.source, job.part, job.piece.describe()] for job in jobs]
    stats = [[str(p), *((p.stat().st_size, p.stat().st_mtime_ns) if p.is_file() else ())] for p in files]
    blob = json.dumps([dumped, plan, stats, Cleaned._fields], sort_keys=True, default=str)
    key = hashlib.sha256(blob.encode()).hexdigest()[:16]
    root = Path(run_dir) / WORK_FOLDER / key
    logs = Path(config.datatrove.logging_dir) / key if config.datatrove.logging_dir else root / "logs"
    return Workspace(root.resolve(), logs.resolve())


def task_jobs(rank: int, tasks: int, jobs: int) -> range:
    """The contiguous run of job indices of task `rank` of `tasks` (pieces of a source stay together)."""
    return range(rank * jobs // tasks, (rank + 1) * jobs // tasks)


def task_count(config: DataConfig, jobs: int) -> int:
    """Cleaning tasks: `datatrove.tasks`, or one per piece up to `MAX_TASKS`; never more than pieces."""
    return max(1, min(config.datatrove.tasks or MAX_TASKS, jobs))


def _pipeline_step_base() -> type:
    """datatrove's `PipelineStep`, imported only when the engine is chosen (an optional extra)."""
    _require_datatrove()
    from datatrove.pipeline.base import PipelineStep

    return PipelineStep


def _quiet_located_errors(record: dict[str, Any]) -> None:
    """A loguru patcher: datatrove logs a failed task's exception with its traceback; a LangadaptError
    (bad input, located) is one line, as everywhere in langadapt, so its traceback is dropped."""
    exception = record.get("exception")
    if exception is not None and isinstance(exception.value, LangadaptError):
        record["exception"] = None


class CleanPieces(_pipeline_step_base()):  # type: ignore[misc]
    """Step 1: clean this task's pieces into piece files (skipping those already written)."""

    name = "clean pieces"
    type = "langadapt"

    def __init__(self, config: DataConfig, jobs: list[Job], root: str, tasks: int) -> None:
        super().__init__()
        self.config, self.jobs, self.root, self.tasks = config, jobs, root, tasks

    def run(self, data: Any, rank: int = 0, world_size: int = 1) -> Iterator[Any]:
        from loguru import logger

        if world_size != self.tasks:
            raise LangadaptError(f"data: the cleaning step was planned for {self.tasks} tasks, run with {world_size}")
        logger.configure(patcher=_quiet_located_errors)
        space = Workspace(Path(self.root), Path(self.root))
        started = False
        for index in task_jobs(rank, self.tasks, len(self.jobs)):
            path = space.piece(index)
            if path.is_file():
                self.stat_update("pieces_kept")
                continue
            if not started:  # the filters load their models once per task, and not at all for a finished one
                init_worker(self.config)
                started = True
            try:
                _write_piece(path, clean_piece(self.jobs[index]))
            except Exception as err:
                message = str(err) if isinstance(err, LangadaptError) else f"{type(err).__name__}: {err}"
                space.error(index).parent.mkdir(parents=True, exist_ok=True)
                space.error(index).write_text(message + "\n")
                raise
            self.stat_update("pieces_cleaned")
        yield from ()


def _write_piece(path: Path, batches: Iterator[list[Cleaned] | float]) -> None:
    """A piece's batches, one pickle each in one zstd stream, in place only once whole (tmp, then rename)."""
    import zstandard

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as raw, zstandard.ZstdCompressor(level=3).stream_writer(raw) as out:
            for batch in batches:
                pickle.dump(batch, out, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def read_pieces(space: Workspace, jobs: list[Job]) -> Iterator[tuple[int, Any]]:
    """(job index, batch) of every piece file in job order: the stream `merge.merge` reads.

    The files are this engine's own, written by `_write_piece` in this run directory (pickle is
    trusted here as it is between `workers`' processes)."""
    import zstandard

    for index in range(len(jobs)):
        path = space.piece(index)
        if not path.is_file():
            raise LangadaptError(f"data: cleaned piece {path} ({jobs[index].piece.describe()}) is missing; "
                                 "run the cleaning step again")
        with open(path, "rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as stream:
            while True:
                try:
                    batch = pickle.load(stream)
                except EOFError:
                    break
                except Exception as err:  # noqa: BLE001 - a damaged file is one located error
                    raise LangadaptError(f"data: cleaned piece {path} is damaged ({err}); delete it and run "
                                         "again (its task is redone)") from None
                yield index, batch


def clean_corpus(config: DataConfig, jobs: list[Job], space: Workspace, workers: int) -> int:
    """Step 1 on this node: run every unfinished cleaning task (`LocalPipelineExecutor`); returns the tasks.

    A task marked complete whose pieces are not all on disk (deleted, or from an interrupted run of
    another task count) loses its marker first: the piece files are the truth, the markers a shortcut."""
    _require_datatrove()
    from datatrove.executor import LocalPipelineExecutor

    tasks = task_count(config, len(jobs))
    logs = space.clean_logs(tasks)
    _forget_unfinished(space, logs, tasks, len(jobs))
    shutil.rmtree(space.root / "errors", ignore_errors=True)
    executor = LocalPipelineExecutor([CleanPieces(config, jobs, str(space.root), tasks)], tasks=tasks,
                                     workers=max(1, min(workers, tasks)), logging_dir=str(logs))
    try:
        executor.run()
    except Exception as err:  # noqa: BLE001 - a task's failure, whatever its type: report the located one
        # A task stopped mid-piece by the failure of another leaves its temporary file: never a piece.
        for partial in space.root.rglob("*.tmp"):
            partial.unlink(missing_ok=True)
        raise _first_error(space, len(jobs)) or err from None
    return tasks


def _forget_unfinished(space: Workspace, logs: Path, tasks: int, jobs: int) -> None:
    for rank in range(tasks):
        if not all(space.piece(i).is_file() for i in task_jobs(rank, tasks, jobs)):
            (logs / "completions" / f"{rank:05d}").unlink(missing_ok=True)


def _first_error(space: Workspace, jobs: int) -> LangadaptError | None:
    """The located error of the earliest failed piece, as one process reading in order would raise it."""
    for index in range(jobs):
        if space.error(index).is_file():
            return LangadaptError(space.error(index).read_text().strip())
    return None


def run(slice_: DataSlice, ctx: StageContext) -> dict[str, Any]:
    """The data stage with `engine: datatrove` on this node (`stage.run` dispatches here)."""
    _require_datatrove()
    config, parts = slice_.config, PartTimer()
    with parts.measure("plan_pieces"):
        jobs, input_bytes = plan_jobs(config)
    space = workspace(config, jobs, ctx.run_dir)
    _drop_stale(space)
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


def _drop_stale(space: Workspace) -> None:
    """Work folders of other settings or files: never merged again, only disk."""
    for other in space.root.parent.glob("*") if space.root.parent.is_dir() else ():
        if other != space.root and other.is_dir():
            shutil.rmtree(other, ignore_errors=True)


class FinishPreparation(_pipeline_step_base()):  # type: ignore[misc]
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

        logger.configure(patcher=_quiet_located_errors)
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


def submit_preparation(recipe_path: str | Path, overrides: list[str] | None = None, until: str = "embeddings",
                       dependency: str | None = None) -> str:
    """Submit the corpus preparation of a recipe as Slurm jobs from a login node; returns the last job's id.

    Two jobs: the cleaning array (`datatrove.tasks` tasks, `datatrove.cpus_per_task` cores each;
    only the unfinished tasks are submitted) and, after it succeeded (`afterok`), one job of
    `datatrove.finish_cpus` cores that runs `langadapt run RECIPE --until <until>` (merge, then the
    stages up to `until`). The GPU job depends on the returned id (`--dependency=afterok:<id>`).
    `dependency` is a job id the cleaning array waits for (`afterok`). The run directory must be on
    a filesystem the nodes share."""
    from langadapt.recipe.cluster import preparation_target
    from langadapt.recipe.schema import load_recipe

    recipe = Path(recipe_path).resolve()
    overrides = list(overrides or [])
    loaded = load_recipe(recipe, overrides)
    config = loaded.recipe.data
    jobs, _ = plan_jobs(config)
    space = workspace(config, jobs, loaded.recipe.run_dir)
    _drop_stale(space)
    tasks = task_count(config, len(jobs))
    _forget_unfinished(space, space.clean_logs(tasks), tasks, len(jobs))
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
    _require_datatrove()
    from datatrove.executor import SlurmPipelineExecutor

    return SlurmPipelineExecutor


class _Slurm(_slurm_base()):  # type: ignore[misc]
    """datatrove's Slurm executor without the `#SBATCH --partition` it writes bare when no partition is
    given (sbatch refuses that line); without one the site's default partition runs the jobs."""

    def get_sbatch_args(self, max_array: int = 1) -> dict:
        return {key: value for key, value in super().get_sbatch_args(max_array).items()
                if not (key == "partition" and value is None)}


UNTIL = ("data", "tokenizer", "embeddings")
"""The stages a preparation may end with (the CPU stages; training is the GPU job's)."""


def main(argv: list[str] | None = None) -> int:
    """`python -m langadapt.data.datatrove_engine submit RECIPE [--set KEY=VALUE ...] [--until STAGE]`:
    `submit_preparation` from a shell (the submit.sh of `langadapt launch --slurm` runs it). Prints
    the last job's id alone on stdout (datatrove's log goes to stderr), so `prepare=$(...)` is the id;
    a recipe or submission error is one line on stderr and exit code 2."""
    import argparse
    import contextlib

    parser = argparse.ArgumentParser(prog="python -m langadapt.data.datatrove_engine",
                                     description="Corpus preparation on datatrove over Slurm.")
    commands = parser.add_subparsers(dest="command", required=True)
    submit = commands.add_parser("submit", help="submit the cleaning array and the job that merges and runs the "
                                                "stages up to --until; print that job's id")
    submit.add_argument("recipe", help="recipe YAML")
    submit.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="recipe override, as `langadapt run --set` (repeatable)")
    submit.add_argument("--until", default="embeddings", choices=UNTIL, help="last stage of the preparation")
    submit.add_argument("--dependency", metavar="JOB_ID", help="a job the cleaning array waits for (afterok)")
    args = parser.parse_args(argv)
    try:
        with contextlib.redirect_stdout(sys.stderr):  # nothing but the id on stdout
            job = submit_preparation(args.recipe, args.overrides, until=args.until, dependency=args.dependency)
    except (LangadaptError, subprocess.CalledProcessError, OSError) as err:  # sbatch refused, or is not here
        print(f"langadapt: error: {err}", file=sys.stderr)
        return 2
    print(job)
    return 0


if __name__ == "__main__":
    # The module under its own name, not as __main__: datatrove pickles the steps for its jobs by
    # reference, and a job cannot import `__main__.CleanPieces`.
    from langadapt.data.datatrove_engine import main as _main

    sys.exit(_main())
