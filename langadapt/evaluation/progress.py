"""What evaluation says while it runs: one unit per model and task, a bar on a terminal, lines in logs.

Scoring a 7B model on a few suites takes minutes per model, and without this nothing was printed
between "evaluate: base, init, ..." and the stage's "done in 611 s" (nor in `langadapt eval`).
The mechanism is training's (`langadapt.runtime.logs.terminal_bar`): a rich bar on
stderr when it is a terminal, whose description names the unit being scored, with each finished
unit printed above it; elsewhere (Slurm logs, CI, pipes) one plain log line per finished unit:

    evaluate: model 2/4 init loaded in 1.3 s; 5 tasks
    evaluate: model 2/4 init, task 3/5 multilingual/nb_pairs (nb): accuracy 0.7812 ± 0.0742 (n=32) in 4.2 s

The headline of a unit is its first number as results.json stores it (`headline`), rounded to
four decimals, so a log can be checked against the results file.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, final

log = logging.getLogger("langadapt")

Scorer = Callable[[Any, Any], str]
"""(model, tokenizer) -> the unit's headline; it stores its numbers into the results itself."""


@dataclass(frozen=True)
class Unit:
    """One task scored on one model: what the progress line names and the call that does it."""

    task: str
    """The task's name as the report keys it (`bpb`, `SUITE/TASK`, `samples`)."""
    lang: str
    """The language(s) or direction(s) it measures, for the line."""
    score: Scorer
    """Scores the task on one model (see `Scorer`)."""


def number(value: float) -> str:
    """A headline number: four decimals (results.json keeps the full float)."""
    return f"{value:.4f}"


@final
class EvalProgress:
    """Progress over `models` x their units: `model` when one is loaded, `unit` around each task.

    Opened as a context manager so that a terminal bar is always stopped (also on an error)."""

    def __init__(self, models: list[str], units_per_model: int | dict[str, int]) -> None:
        """`units_per_model`: one count for every model, or each model's own (a translation task
        with `models:` runs on some models only)."""
        self.models = models
        self.counts = (units_per_model if isinstance(units_per_model, dict)
                       else dict.fromkeys(models, units_per_model))
        self._bar: Any = None
        self._task: Any = None
        self._done = 0

    def __enter__(self) -> EvalProgress:
        from langadapt.runtime.logs import terminal_bar

        bar = terminal_bar("evaluate", "evaluate", sum(self.counts.values()))
        if bar is not None:
            self._bar, self._task = bar
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def _where(self, index: int, name: str) -> str:
        return f"model {index + 1}/{len(self.models)} {name}"

    def _say(self, line: str) -> None:
        """A line above the bar on a terminal, else a log line (each finished unit stays visible)."""
        if self._bar is not None:
            self._bar.console.print(f"evaluate: {line}", highlight=False, markup=False, soft_wrap=True)
        else:
            log.info("evaluate: %s", line)

    def model(self, index: int, name: str, load: Callable[[], tuple[Any, Any]]) -> tuple[Any, Any]:
        """Load model `index` through `load`, saying so (loading a 7B model takes a while too)."""
        self._show(f"{self._where(index, name)} loading")
        started = time.perf_counter()
        loaded = load()
        self._say(f"{self._where(index, name)} loaded in {time.perf_counter() - started:.1f} s; "
                  f"{self.counts[name]} task{'s' if self.counts[name] != 1 else ''}")
        return loaded

    def unit(self, index: int, name: str, position: int, unit: Unit, model: Any, tok: Any) -> None:
        """Score `unit` (task `position` of model `index`) and say its headline and seconds."""
        where = f"{self._where(index, name)}, task {position + 1}/{self.counts[name]} {unit.task} ({unit.lang})"
        self._show(where)
        started = time.perf_counter()
        headline = unit.score(model, tok)
        self._say(f"{where}: {headline} in {time.perf_counter() - started:.1f} s")
        self._done += 1
        if self._bar is not None:
            self._bar.update(self._task, completed=self._done)

    def _show(self, info: str) -> None:
        """What the bar is on now (nothing in logs: the line comes when the unit ends)."""
        if self._bar is not None:
            self._bar.update(self._task, info=info)


def headline(kind: str, result: Any) -> str:
    """The number a unit's line shows, read from what the unit stored in the results."""
    if kind == "bpb":
        return f"bits_per_byte {number(result['bits_per_byte'])}"
    if kind == "minimal_pairs":
        stderr = result.get("accuracy_stderr")
        spread = f" ± {number(stderr)}" if stderr is not None else ""
        return f"accuracy {number(result['accuracy'])}{spread} (n={result['pairs']})"
    if kind == "translation":
        return "; ".join(f"{direction} chrF {number(m['chrf'])} BLEU {number(m['bleu'])}"
                         for direction, m in result.items())
    if kind == "lm_eval":
        parts = []
        for task, metrics in result.items():
            first = next(((k, v) for k, v in metrics.items() if k != "samples"), None)
            parts.append(f"{task} {first[0]} {number(first[1])}" if first else f"{task} (no metric)")
        return "; ".join(parts) or "no results"
    if kind == "samples":
        return f"{sum(len(v) for v in result.values())} samples"
    raise ValueError(f"headline: unknown unit kind {kind!r}")
