"""A row plan: how each new row is made from the old matrix, computed once, applied per matrix.

Every method (mean, focus, wechsel, align and the baselines) reduces to the same shape: new row i
is a weighted combination of old rows (a sparse new x old matrix), except rows marked to receive
the mean row, a random draw or zeros. Expressing the methods this way keeps them independent of the model:
the same plan is applied to the input embeddings, to the untied output head (with the HEAD's own
rows, mean and covariance) and to a head bias, and the whole matrix is filled by one sparse
matmul instead of a Python loop over 32k rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from langadapt.embeddings.draws import sample_initializer, sample_like, sample_resized
from langadapt.embeddings.mapping import VocabMapping
from langadapt.errors import LangadaptError
from langadapt.recipe.embeddings import EmbeddingConfig

USE_WEIGHTS, USE_MEAN, USE_RANDOM, USE_RESIZE, USE_INITIALIZER, USE_ZERO = range(6)
"""How a row is made: the weights, the old matrix's mean row, N(mean, cov) (`draws.sample_like`),
transformers' resize draw (`draws.sample_resized`), N(0, init_std^2) (`draws.sample_initializer`), zeros."""


@dataclass
class RowPlan:
    """new = weights @ old, then rows whose `fill` is not USE_WEIGHTS are replaced (`apply_plan`)."""

    weights: torch.Tensor
    """Sparse (coalesced COO) float32 [new_rows, old_rows]; each used row sums to 1."""
    fill: torch.Tensor
    """int8 [new_rows]: USE_WEIGHTS or one of the fills (USE_MEAN, USE_RANDOM, ..., see their docstring)."""
    init_std: float = 0.0
    """Standard deviation of USE_INITIALIZER rows (the model config's `initializer_range`)."""

    @property
    def rows(self) -> int:
        return int(self.fill.shape[0])


def copied_rows(plan: RowPlan, mapping: VocabMapping) -> list[int]:
    """Rows of tokens the base has too (copied, or special mapped by role) that the plan copies
    exactly from that token's base row: weight 1.0 on the one old row.

    Both are needed. The mapping says which tokens are shared, but the method decides whether their
    rows are the base's: `random_full_cov` draws even the copied tokens afresh. The plan alone is not enough
    either: a new token `pp` decomposed into `p`,`p` gets weight 1.0 on `p`'s row (the duplicates
    summed), the base's values under another token's name, and is new. The sparse product gives a
    copied row bit for bit (1.0 * x and nothing else), whatever the method.
    """
    weights = plan.weights.coalesce()
    rows, values = weights.indices()[0], weights.values()
    entries = torch.bincount(rows, minlength=plan.rows)
    unit = torch.zeros(plan.rows, dtype=torch.bool)
    unit[rows[values == 1.0]] = True
    exact = (entries == 1) & unit & (plan.fill == USE_WEIGHTS)
    return [i for i in range(mapping.new_size) if mapping.status[i] in ("copied", "special")
            and len(mapping.pieces[i]) == 1 and bool(exact[i])]


@dataclass(frozen=True)
class SharedRows:
    """The rows of the new embedding matrices (input and head alike) copied from the base model.

    The embeddings stage records them (`RunLayout.embeddings.shared_rows`); a training stage with
    `train_rows: new` keeps them at their values (langadapt.train.rows) and trains the others.
    """

    rows: int
    """Rows of the matrices they index (the new vocabulary, padded): a model of another size is refused."""
    ids: tuple[int, ...]
    """Row ids, ascending."""

    def save(self, path: Path) -> None:
        path.write_text(json.dumps({"rows": self.rows, "shared": list(self.ids)}) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> SharedRows:
        doc = json.loads(path.read_text(encoding="utf-8"))
        return cls(int(doc["rows"]), tuple(int(i) for i in doc["shared"]))


class PlanBuilder:
    """Collects (row, old id, weight) triples; rows without any become mean rows."""

    def __init__(self, rows: int, old_rows: int) -> None:
        self.rows, self.old_rows = rows, old_rows
        self._r: list[np.ndarray] = []
        self._c: list[np.ndarray] = []
        self._w: list[np.ndarray] = []
        self.fill = torch.full((rows,), USE_MEAN, dtype=torch.int8)

    def add(self, row: int, old_ids: list[int], weights: list[float] | None = None) -> None:
        """Row `row` = weighted sum of old rows (uniform weights = their mean)."""
        if not old_ids:
            return
        w = (
            np.full(len(old_ids), 1.0 / len(old_ids))
            if weights is None
            else np.asarray(weights, dtype=np.float64)
        )
        self.add_many(np.full(len(old_ids), row), np.asarray(old_ids), w)

    def add_many(self, rows: np.ndarray, old_ids: np.ndarray, weights: np.ndarray) -> None:
        """Vectorised `add`: triples for many rows at once (weights already normalised per row)."""
        self._r.append(np.asarray(rows, dtype=np.int64))
        self._c.append(np.asarray(old_ids, dtype=np.int64))
        self._w.append(np.asarray(weights, dtype=np.float64))
        self.fill[torch.as_tensor(np.unique(rows), dtype=torch.long)] = USE_WEIGHTS

    def mark(self, rows: list[int], kind: int = USE_RANDOM) -> None:
        """These rows are filled as `kind` says (default: independent N(mean, cov) draws of each matrix)."""
        if rows:
            self.fill[torch.as_tensor(rows, dtype=torch.long)] = kind

    def build(self, init_std: float = 0.0) -> RowPlan:
        r = np.concatenate(self._r) if self._r else np.zeros(0, dtype=np.int64)
        c = np.concatenate(self._c) if self._c else np.zeros(0, dtype=np.int64)
        w = np.concatenate(self._w) if self._w else np.zeros(0)
        keep = self.fill.numpy()[r] == USE_WEIGHTS  # a row marked for a fill later drops its weights
        indices = torch.as_tensor(np.stack([r[keep], c[keep]]))
        values = torch.as_tensor(w[keep], dtype=torch.float64)
        coo = torch.sparse_coo_tensor(indices, values, (self.rows, self.old_rows), check_invariants=True)
        # Sum duplicates (a piece used twice counts twice, as in the plain mean) in float64.
        weights = coo.coalesce().to(torch.float32)
        return RowPlan(weights=weights, fill=self.fill.clone(), init_std=init_std)


def mapping_rows(builder: PlanBuilder, mapping: VocabMapping, ids: list[int] | None = None) -> None:
    """FVT: each (listed) new token's row = mean of its old pieces' rows (copies: the one row)."""
    rows = [i for i in (range(mapping.new_size) if ids is None else ids) if mapping.pieces[i]]
    if not rows:
        return
    lengths = np.array([len(mapping.pieces[i]) for i in rows])
    flat = np.fromiter(
        chain.from_iterable(mapping.pieces[i] for i in rows), dtype=np.int64, count=int(lengths.sum())
    )
    builder.add_many(np.repeat(rows, lengths), flat, np.repeat(1.0 / lengths, lengths))


def apply_plan(plan: RowPlan, matrix: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """The new float32 matrix [plan.rows, dim] built from `matrix` [old_rows, dim], on its device.

    The plan is built on the CPU; it moves to the matrix (a model already on a GPU stays there:
    no hidden copy of a 7B model's embeddings to host memory). Filled rows are drawn in a fixed
    order of kinds, so a seed gives the same matrix whatever else the plan holds.
    """
    x = matrix.detach().float()
    out = torch.sparse.mm(plan.weights.to(x.device), x)
    fill = plan.fill.to(x.device)
    draws = {
        USE_MEAN: lambda n: x.mean(0).expand(n, -1),
        USE_RANDOM: lambda n: sample_like(x, n, generator),
        USE_RESIZE: lambda n: sample_resized(x, n, generator),
        USE_INITIALIZER: lambda n: sample_initializer(x, n, generator, plan.init_std),
        USE_ZERO: lambda n: torch.zeros(n, x.shape[1], device=x.device),
    }
    for kind, draw in draws.items():
        rows = fill == kind
        if rows.any():
            out[rows] = draw(int(rows.sum()))
    return out


@dataclass
class PlanInputs:
    """What a method may use besides the mapping."""

    mapping: VocabMapping
    rows: int
    """Rows of the new matrices (the new vocabulary, padded)."""
    old_rows: int
    """Rows of the old matrices."""
    old_tokenizer: PreTrainedTokenizerBase
    new_tokenizer: PreTrainedTokenizerBase
    config: EmbeddingConfig
    corpus: Iterable[str] | None
    seed: int
    initializer_range: float | None = None
    """The model config's `initializer_range` (None: the config has none); `model_init` draws with it."""


def bounded_texts(corpus: Iterable[str] | None, max_mb: float, method: str) -> list[str]:
    """At most `max_mb` megabytes (UTF-8) of non-empty texts from `corpus`, in order."""
    if corpus is None:
        raise LangadaptError(
            f"embeddings.method={method!r} needs target-language text, but no corpus was given"
        )
    budget, texts = int(max_mb * 1e6), []
    for text in corpus:
        if not text:
            continue
        texts.append(text)
        budget -= len(text.encode("utf-8"))
        if budget <= 0:
            break
    if not texts:
        raise LangadaptError(
            f"embeddings.method={method!r} needs target-language text, but the corpus is empty"
        )
    return texts
