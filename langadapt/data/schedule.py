"""Repetition scheduling maths: how many tokens each source gets and what repeats are worth.

Muennighoff et al. 2023 ("Scaling Data-Constrained Language Models") fit the value of repeated
data: with U unique tokens trained for D tokens (R_D = D/U - 1 repetitions) the model behaves as
if it had seen D' = U + U * R_D* * (1 - exp(-R_D / R_D*)) fresh tokens, R_D* = 15.387756.
D'/D is 0.984 at 2 epochs, 0.931 at 4, 0.828 at 8 and 0.661 at 16: up to ~4 epochs is nearly as
good as new data, so we warn above 4 and refuse above 16 unless forced.

Budget rule: sources with `epochs` take epochs * U tokens first; the rest of the budget is split
among the weighted sources in proportion to their weights, capping any at its `max_epochs` and
giving the excess to the others (water-filling). Everything here is pure and unit tested.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from langadapt.errors import LangadaptError
from langadapt.recipe.data import MAX_EPOCHS  # the one epoch cap, a recipe setting's limit

R_D_STAR = 15.387756
"""Muennighoff et al.'s fitted "half-life" of repeated data, in repetitions."""
WARN_EPOCHS = 4.0


class EpochCapError(LangadaptError):
    """A source would pass an epoch cap (16 passes, or its own `max_epochs`). Unlike the mixture's
    other refusals, fewer steps fix it too: a training stage names its `steps` with it."""


def effective_data(unique_tokens: float, total_tokens: float) -> float:
    """Muennighoff D': the fresh-data equivalent of training `total_tokens` on `unique_tokens`.

    Below one epoch nothing is repeated, so D' = D (the fitted formula is for R_D >= 0).
    """
    if unique_tokens <= 0:
        raise ValueError(f"unique_tokens must be > 0, got {unique_tokens}")
    if total_tokens <= unique_tokens:
        return float(total_tokens)
    repeats = total_tokens / unique_tokens - 1.0
    return unique_tokens + unique_tokens * R_D_STAR * (1.0 - math.exp(-repeats / R_D_STAR))


def effective_ratio(epochs: float) -> float:
    """D'/D after `epochs` passes: 0.984 at 2, 0.931 at 4, 0.828 at 8, 0.661 at 16."""
    if epochs <= 0:
        raise ValueError(f"epochs must be > 0, got {epochs}")
    return effective_data(1.0, epochs) / epochs


@dataclass(frozen=True)
class SourceBudget:
    """What the planner needs to know about one source."""

    name: str
    unique_tokens: float
    weight: float | None = None
    epochs: float | None = None
    max_epochs: float | None = None


@dataclass(frozen=True)
class SourcePlan:
    """The planned use of one source."""

    name: str
    unique_tokens: float
    tokens: float
    epochs: float
    effective_tokens: float
    effective_ratio: float
    share: float


@dataclass(frozen=True)
class MixPlan:
    """Per-source tokens, epochs and effective data for one token budget."""

    total_tokens: float
    sources: list[SourcePlan]
    warnings: list[str] = field(default_factory=list)

    @property
    def effective_tokens(self) -> float:
        """D' summed over sources (each source's repeats are discounted on their own)."""
        return sum(s.effective_tokens for s in self.sources)

    @property
    def effective_ratio(self) -> float:
        """D'/D of the whole mixture."""
        return self.effective_tokens / self.total_tokens if self.total_tokens else 1.0

    def source(self, name: str) -> SourcePlan:
        """The plan of one source by name."""
        for plan in self.sources:
            if plan.name == name:
                return plan
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form for manifests and `langadapt plan --json`."""
        return {
            "total_tokens": self.total_tokens,
            "effective_tokens": self.effective_tokens,
            "effective_ratio": self.effective_ratio,
            "sources": [asdict(s) for s in self.sources],
            "warnings": list(self.warnings),
        }


def _as_budget(source: SourceBudget | Mapping[str, Any]) -> SourceBudget:
    if isinstance(source, SourceBudget):
        budget = source
    else:
        keys = ("name", "unique_tokens", "weight", "epochs", "max_epochs")
        budget = SourceBudget(**{k: source.get(k) for k in keys})  # type: ignore[arg-type]
    if not budget.unique_tokens or budget.unique_tokens <= 0:
        raise LangadaptError(f"source {budget.name}: unknown or zero size: set unique_tokens or provide data")
    if budget.weight is not None and budget.epochs is not None:
        raise LangadaptError(f"source {budget.name}: set either weight or epochs, not both")
    return budget


def _weight(budget: SourceBudget) -> float:
    """A weighted source without an explicit weight counts as weight 1."""
    return 1.0 if budget.weight is None else budget.weight


def _split_by_weight(budgets: list[SourceBudget], tokens: float) -> dict[str, float]:
    """Water-filling: proportional to weight, no source above its max_epochs."""
    alloc: dict[str, float] = {}
    open_ = [b for b in budgets if _weight(b) > 0]
    for b in budgets:
        alloc[b.name] = 0.0
    left = tokens
    while open_ and left > 0:
        total_w = sum(1.0 if b.weight is None else b.weight for b in open_)
        capped = [
            b for b in open_
            if b.max_epochs is not None
            and left * _weight(b) / total_w > b.max_epochs * b.unique_tokens
        ]
        if not capped:
            for b in open_:
                alloc[b.name] = left * _weight(b) / total_w
            return alloc
        for b in capped:
            alloc[b.name] = b.max_epochs * b.unique_tokens  # type: ignore[operator]
            left -= alloc[b.name]
            open_.remove(b)
    if left > 1e-9 * tokens and not open_:
        names = ", ".join(b.name for b in budgets)
        raise EpochCapError(
            f"token budget exceeds max_epochs of every weighted source ({names}): "
            "raise max_epochs, add data, or lower the budget"
        )
    return alloc


def plan_mixture(
    sources: Sequence[SourceBudget | Mapping[str, Any]], total_tokens: float, force: bool = False
) -> MixPlan:
    """Tokens, epochs and D' per source for a budget of `total_tokens`.

    Raises LangadaptError when a source would exceed 16 epochs (unless `force`), when fixed-epoch
    sources alone exceed the budget, or when the weights sum to zero.
    """
    budgets = [_as_budget(s) for s in sources]
    if not budgets:
        raise LangadaptError("mixture has no sources")
    fixed = {b.name: b.epochs * b.unique_tokens for b in budgets if b.epochs is not None}
    weighted = [b for b in budgets if b.epochs is None]
    rest = total_tokens - sum(fixed.values())
    if rest < -1e-9 * total_tokens:
        raise LangadaptError(
            f"sources with fixed epochs need {sum(fixed.values()):.4g} tokens, "
            f"more than the budget of {total_tokens:.4g}: lower their epochs or raise the budget"
        )
    if not weighted and rest > 1e-9 * total_tokens:
        raise LangadaptError(
            f"sources with fixed epochs fill only {sum(fixed.values()):.4g} of {total_tokens:.4g} tokens "
            "and no source has a weight: give one a weight to take the rest, or raise its epochs"
        )
    if weighted and rest > 0 and all(_weight(b) == 0 for b in weighted):
        names = ", ".join(b.name for b in weighted)
        raise LangadaptError(f"weights of sources {names} sum to zero: give at least one a weight > 0")
    tokens = dict(fixed)
    if weighted:
        tokens.update(_split_by_weight(weighted, max(rest, 0.0)))
    return _finish(budgets, tokens, total_tokens, force)


def _finish(budgets: list[SourceBudget], tokens: dict[str, float], total: float, force: bool) -> MixPlan:
    plans, warnings = [], []
    for b in budgets:
        t = tokens[b.name]
        epochs = t / b.unique_tokens
        if epochs > MAX_EPOCHS and not force:
            raise EpochCapError(
                f"source {b.name}: {epochs:.1f} epochs is above {MAX_EPOCHS:g} (repeated data is then "
                "worth < 1/3 of fresh data): add data, lower its share, or set data.force_epochs: true"
            )
        if epochs > WARN_EPOCHS:
            warnings.append(
                f"source {b.name}: {epochs:.1f} epochs (D'/D = {effective_ratio(epochs):.3f}); "
                f"above {WARN_EPOCHS:g} epochs repeats are worth clearly less than fresh data"
            )
        eff = effective_data(b.unique_tokens, t) if t > 0 else 0.0
        plans.append(
            SourcePlan(b.name, b.unique_tokens, t, epochs, eff, eff / t if t > 0 else 1.0,
                       t / total if total else 0.0)
        )
    return MixPlan(total_tokens=float(total), sources=plans, warnings=warnings)
