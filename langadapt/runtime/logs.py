"""Console logging: rich when attached to a terminal, plain lines otherwise (Slurm logs)."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any


def setup_logging(debug: bool = False) -> None:
    """Plain lines carry `[rank r]`, the rank the pipeline itself will act on (`placement`)."""
    level = logging.DEBUG if debug else logging.INFO
    rank = _rank()
    if sys.stderr.isatty():
        from rich.logging import RichHandler

        handler: logging.Handler = RichHandler(show_path=False, rich_tracebacks=debug)
        fmt = "%(message)s"
    else:
        handler = logging.StreamHandler(sys.stderr)
        fmt = f"%(asctime)s [rank {rank}] %(message)s"
    handler.setFormatter(logging.Formatter(fmt, datefmt="%H:%M:%S"))
    root = logging.getLogger("langadapt")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
    # transformers/deepspeed are chatty at INFO; their warnings still show.
    for noisy in ("transformers", "DeepSpeed", "deepspeed", "datasets"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # "Loading weights" / "Writing model shards" bars on every load and save drown the stage log.
    # transformers reads this variable when it is imported; importing it here just to switch the
    # bars off would cost ~1.5 s before every CLI error, so only a loaded one is told directly.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "transformers.utils.logging" in sys.modules:
        sys.modules["transformers.utils.logging"].disable_progress_bar()


def _rank() -> str:
    """This process's rank as the pipeline reads it; "?" when the launcher's variables are
    unusable (the pipeline then stops with the one-line error naming the variable)."""
    from langadapt.errors import LangadaptError
    from langadapt.runtime.placement import DistInfo

    try:
        return str(DistInfo.from_env().rank)
    except LangadaptError:
        return "?"


def clock(seconds: float) -> str:
    """Seconds as H:MM:SS (days as hours: a month-long run says 720:00:00)."""
    whole = int(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def terminal_bar(label: str, description: str, total: int, completed: int = 0) -> tuple[Any, Any] | None:
    """A started rich bar on stderr (label, bar, done/total, elapsed, eta, the task's `info`
    field) when stderr is a terminal, else None: the caller then logs plain lines, which is what a
    Slurm log or a pipe wants. Shared by training (`ConsoleProgress`) and evaluation
    (`langadapt.evaluation.progress`) so that both show progress the same way."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    console = Console(stderr=True)
    if not console.is_terminal:
        return None
    progress = Progress(
        TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[info]}"), console=console,
    )
    progress.start()
    return progress, progress.add_task(description, total=total, completed=completed, info="")
