"""The data stage: sources in, cleaned train/held-out documents out, on every core.

`run(slice_, ctx)` reads every source of `slice_.config` (the data section), cleans it, splits off
held-out documents by a hash of their normalised text (or, with `data.split_by: id`, of their id's
last path component: `preparation.split_digest`), and writes `ctx.out/{train,valid}/<source>.jsonl.gz`
(format: `langadapt.data.documents`) plus `DataPaths.stats`. The work itself is `preparation`'s
and `merge`'s (pieces cleaned by workers, merged in piece order: the output of one process for any
number of workers); this module runs it on local worker processes (`workers.ordered_batches`), or
hands it to datatrove (`data.engine: datatrove`, `datatrove_engine`).
"""

from __future__ import annotations

from typing import Any

from langadapt.data.merge import merge, write_stats
from langadapt.data.preparation import AHEAD_BATCHES, clean_piece, init_worker, plan_jobs, worker_count
from langadapt.data.workers import ordered_batches
from langadapt.recipe.data import DataSlice
from langadapt.run.context import StageContext
from langadapt.run.timing import PartTimer

__all__ = ["run"]


def run(slice_: DataSlice, ctx: StageContext) -> dict[str, Any]:
    """Clean and split every source; returns the per-source summary for the manifest."""
    if slice_.config.engine == "datatrove":  # cleaning as datatrove tasks, the same bytes (`datatrove_engine`)
        from langadapt.data import datatrove_engine

        return datatrove_engine.run(slice_, ctx)
    config, parts = slice_.config, PartTimer()
    with parts.measure("plan_pieces"):
        # Resolve every source first, so that a typo in the last path fails before any long work.
        jobs, input_bytes = plan_jobs(config)
    workers = worker_count(config.num_workers, input_bytes)
    stream = ordered_batches(jobs, clean_piece, workers, describe=lambda job: job.piece.describe(),
                             initializer=init_worker, initargs=(config,), ahead=AHEAD_BATCHES)
    try:
        with parts.measure("clean_dedup_write"):
            summary, worker_cpu = merge(config, jobs, stream, ctx, workers)
    finally:
        stream.close()
    write_stats(summary, input_bytes, ctx)
    # How this run went (the manifest's, not stats.json's: the data folder is the same for any workers).
    parts_ = {**parts.as_dict(), "workers_clean": {"cpu_s": round(worker_cpu, 2)}}
    return {**summary, "run": {"workers": workers, "parts": parts_}}
