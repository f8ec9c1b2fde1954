"""Ordered work on every core: jobs run in worker processes, their results come back in job order.

Why not `multiprocessing.Pool.imap`: it sends every job at once and keeps every finished result
until the parent asks for it, so a parent slower than its workers (writing, deduplicating) holds
the corpus in memory; and a job's result arrives whole, where one piece of a source may be
gigabytes of documents. Here each job yields batches, each worker has its own bounded queue, and
a worker takes the next job not yet taken as soon as it has queued its last one's batches, writing
its number beside the job in a shared table (so the parent knows which queue holds the next batch,
and a worker with short jobs takes more of them, where a fixed plan, job `i` to worker
`i % workers`, hands out jobs whatever their sizes: a 64 MB piece counted as much as a 128 MB gzip
file): the parent drains the queue of the job it is at while the other workers run ahead until
their queues are full. Memory is bounded by workers x `ahead` batches, whatever the corpus. How far
ahead is the caller's choice, and it decides the speed-up: a worker whose queue fills before its job
ends waits for the parent to reach that job, so with a queue much smaller than a job the workers
take turns instead of running side by side (the data stage's 4 batches of 1 MB against pieces of
64 MB: 2 workers 1.07x faster than one).

With one worker the jobs run in this process, lazily, with the same function: the results are the
same by construction, and nothing is read ahead of need.

A job that raises sends its exception back; the parent raises it when it reaches that job, after
every earlier job's results, exactly where one process would have stopped. A worker that dies
(killed for memory, a crash in C code) is one error naming its job, not a hang.
"""

from __future__ import annotations

import multiprocessing
import queue
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from langadapt.errors import LangadaptError

Job = TypeVar("Job")
Item = TypeVar("Item")
Result = TypeVar("Result")
QUEUE_BATCHES = 4
"""Batches a worker may have waiting for the parent, unless the caller says (`ordered_batches`' `ahead`)."""
_POLL_SECONDS = 2.0
_BATCH, _END, _ERROR = "batch", "end", "error"


def ordered_batches(
    jobs: Sequence[Job],
    work: Callable[[Job], Iterator[Any]],
    workers: int,
    describe: Callable[[Job], str] = str,
    initializer: Callable[..., None] | None = None,
    initargs: tuple = (),
    ahead: int = QUEUE_BATCHES,
) -> Iterator[tuple[int, Any]]:
    """(job index, batch) for every batch `work(job)` yields, in job order then batch order.

    `work`, `initializer` and the jobs must be picklable (module-level functions) when workers > 1;
    the initializer runs once per worker process (spawned, not forked: the parent may hold threads).
    `ahead`: batches each worker may have waiting for the parent (about one job's worth keeps every
    worker busy: see the module's docstring)."""
    workers = max(1, min(workers, len(jobs)))
    if workers == 1:
        if initializer is not None:
            initializer(*initargs)
        for index, job in enumerate(jobs):
            for batch in work(job):
                yield index, batch
        return
    context = multiprocessing.get_context("spawn")
    queues = [context.Queue(max(1, ahead)) for _ in range(workers)]
    next_job = context.Value("i", 0)  # its lock also guards `taken`
    taken = context.Array("i", [-1] * len(jobs), lock=False)  # the worker that took each job
    processes = [
        context.Process(target=_worker, args=(w, jobs, work, queues[w], next_job, taken, initializer, initargs),
                        daemon=True)
        for w in range(workers)
    ]
    for process in processes:
        process.start()
    try:
        for index, job in enumerate(jobs):
            owner = _owner(taken, index, processes, describe(job))
            while True:
                kind, payload = _next(queues[owner], processes[owner], describe(job))
                if kind == _END:
                    break
                if kind == _ERROR:
                    raise payload
                yield index, payload
        for process in processes:
            process.join()
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
        for process in processes:
            process.join()
        for worker_queue in queues:
            worker_queue.close()
            worker_queue.cancel_join_thread()


def worker_pool(workers: int, initializer: Callable[..., None] | None = None, initargs: tuple = ()) -> ProcessPoolExecutor:
    """Spawned worker processes for `ordered_map` (spawn, not fork: the parent may hold threads of
    tokenizers or torch, which a fork copies half-way)."""
    context = multiprocessing.get_context("spawn")
    return ProcessPoolExecutor(workers, mp_context=context, initializer=initializer, initargs=initargs)


def ordered_map(
    function: Callable[[Item], Result], items: Iterable[Item], pool: ProcessPoolExecutor, workers: int,
    what: Callable[[Item], str],
) -> Iterator[tuple[Item, Result]]:
    """(item, function(item)) in input order, computed on `pool` (`worker_pool(workers, ...)`) with
    at most two items per worker in flight (memory bounded whatever the input); `items` is read lazily.

    For work that comes as a stream of small items (batches of documents to count or encode). A
    `ProcessPoolExecutor`, not a `multiprocessing.Pool`: when a worker dies the executor breaks and
    the stage stops with `what(item)` named, where a Pool replaces the worker and waits forever for
    the item it lost."""
    pending: deque[tuple[Item, Any]] = deque()
    try:
        for item in items:
            pending.append((item, pool.submit(function, item)))
            if len(pending) >= 2 * workers:
                yield _result(*pending.popleft(), what)
        while pending:
            yield _result(*pending.popleft(), what)
    finally:
        for _, future in pending:
            future.cancel()


def _result(item: Item, future: Any, what: Callable[[Item], str]) -> tuple[Item, Any]:
    try:
        return item, future.result()
    except BrokenProcessPool:
        raise LangadaptError(f"a worker {what(item)} died (killed, e.g. for memory, or crashed); nothing of "
                             "this stage was marked complete") from None


def _next(worker_queue: Any, process: Any, where: str) -> tuple[str, Any]:
    """The next message of one worker; an error if the worker died without sending one."""
    while True:
        try:
            return worker_queue.get(timeout=_POLL_SECONDS)
        except queue.Empty:
            if not process.is_alive():
                try:  # it may have sent its last message just before exiting
                    return worker_queue.get(timeout=_POLL_SECONDS)
                except queue.Empty:
                    code = process.exitcode
                    why = "killed, e.g. for memory" if code is not None and code < 0 else "crashed"
                    raise LangadaptError(f"data: the worker reading {where} died (exit code {code}: {why}); "
                                         "nothing of this run was marked complete") from None


def _owner(taken: Any, index: int, processes: list[Any], where: str) -> int:
    """The worker that took job `index`, once one has (jobs are taken in order, so by the time the
    parent is at a job, every worker is at it or past it, or about to take it)."""
    while (owner := taken[index]) < 0:
        if not any(process.is_alive() for process in processes):
            raise LangadaptError(f"data: every worker stopped before reading {where}; nothing of this run "
                                 "was marked complete")
        time.sleep(0.005)
    return owner


def _take(me: int, next_job: Any, taken: Any) -> int:
    """The next job not yet taken, now `me`'s (len(taken) when none is left)."""
    with next_job.get_lock():
        index = next_job.value
        if index < len(taken):
            taken[index] = me
            next_job.value = index + 1
    return index


def _worker(me: int, jobs: Sequence[Any], work: Callable[[Any], Iterator[Any]], out: Any, next_job: Any,
            taken: Any, initializer: Callable[..., None] | None, initargs: tuple) -> None:
    ready = False
    try:
        while (index := _take(me, next_job, taken)) < len(jobs):
            if not ready and initializer is not None:  # after taking a job: its failure is that job's error
                initializer(*initargs)
            ready = True
            for batch in work(jobs[index]):
                out.put((_BATCH, batch))
            out.put((_END, None))
    except BaseException as err:  # noqa: BLE001 - sent to the parent, which raises it in order
        out.put((_ERROR, err if _picklable(err) else LangadaptError(f"{type(err).__name__}: {err}")))


def _picklable(err: BaseException) -> bool:
    import pickle

    try:
        pickle.loads(pickle.dumps(err))
        return True
    except Exception:  # noqa: BLE001 - any failure means: send a plain copy instead
        return False
