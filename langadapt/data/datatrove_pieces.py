"""The datatrove engine's cleaning step and the piece files it leaves: what its tasks and the merge share.

Each task (`CleanPieces`, rank `rank` of `tasks`) runs `preparation.clean_piece` on a contiguous
run of the plan's pieces (`task_jobs`) and saves each piece's batches to `pieces/<job>.pkl.zst`
in the work folder (`Workspace`: pickles in one zstd stream; tmp then rename, so a file that
exists is whole); a failed piece leaves its located error beside it (`first_error`). One process
reads the files back in job order (`read_pieces`) for `merge.merge`. Apart from the executors
(`datatrove_engine`: this node or Slurm) because both run these tasks and read these files; the
piece files are the truth, datatrove's completion markers a shortcut (`forget_unfinished`).

The work folder (`.data.datatrove/<key>/` in the run directory) is keyed by the data section and
the plan (files, sizes, modification times), so pieces of other settings or other files are never
merged (`drop_stale` deletes them).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langadapt.data.preparation import Cleaned, Job, clean_piece, init_worker
from langadapt.errors import LangadaptError
from langadapt.recipe.data import DataConfig

WORK_FOLDER = ".data.datatrove"
"""The engine's folder in the run directory: cleaned pieces and datatrove's logs and markers."""
MAX_TASKS = 1000
"""Default ceiling on cleaning tasks: a Slurm array's usual `MaxArraySize` is 1001."""
_INSTALL = "data.engine: datatrove needs datatrove: pip install 'langadapt[prep]'"


def require_datatrove() -> None:
    """Refuse the datatrove engine in one line when the optional extra is not installed."""
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


def pipeline_step_base() -> type:
    """datatrove's `PipelineStep`, imported only when the engine is chosen (an optional extra)."""
    require_datatrove()
    from datatrove.pipeline.base import PipelineStep

    return PipelineStep


def quiet_located_errors(record: dict[str, Any]) -> None:
    """A loguru patcher: datatrove logs a failed task's exception with its traceback; a LangadaptError
    (bad input, located) is one line, as everywhere in langadapt, so its traceback is dropped."""
    exception = record.get("exception")
    if exception is not None and isinstance(exception.value, LangadaptError):
        record["exception"] = None


class CleanPieces(pipeline_step_base()):  # type: ignore[misc]
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
        logger.configure(patcher=quiet_located_errors)
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


def forget_unfinished(space: Workspace, logs: Path, tasks: int, jobs: int) -> None:
    """Drop the completion marker of each task whose piece files are not all there, so it runs again."""
    for rank in range(tasks):
        if not all(space.piece(i).is_file() for i in task_jobs(rank, tasks, jobs)):
            (logs / "completions" / f"{rank:05d}").unlink(missing_ok=True)


def first_error(space: Workspace, jobs: int) -> LangadaptError | None:
    """The located error of the earliest failed piece, as one process reading in order would raise it."""
    for index in range(jobs):
        if space.error(index).is_file():
            return LangadaptError(space.error(index).read_text().strip())
    return None


def drop_stale(space: Workspace) -> None:
    """Work folders of other settings or files: never merged again, only disk."""
    for other in space.root.parent.glob("*") if space.root.parent.is_dir() else ():
        if other != space.root and other.is_dir():
            shutil.rmtree(other, ignore_errors=True)
