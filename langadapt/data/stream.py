"""A deterministic, exactly resumable stream of packed training sequences over the token shards.

Sample j of the run is a window of seq_len + 1 tokens (inputs and shifted labels) cut from one
source's tokens.bin at a chunk boundary: chunk i = tokens[i*L : i*L + L + 1]. Which source and
which chunk are pure functions of a few integers:

- sources are interleaved "largest deficit first" (as Megatron's blended datasets): sample t goes
  to the source whose count lags its ideal share (t+1) * n_s / N the most (exact integer maths,
  ties to the first source by name), so at every prefix every source is within one sample of its
  ideal share and repeats are spread over the whole run, never burst;
- a source's k-th sample is chunk perm_e[k mod C] of epoch e = k // C, where perm_e is a fresh
  permutation of its C chunks seeded by (seed, source, e).

So the position is (samples consumed, per-source counts): `load_state_dict` restores it in O(1)
without reading data, and the global sample order does not depend on the number of ranks.

`mixture` None means natural proportions: every source weighted by its own token count, so every
source is repeated equally often. Sources in `tokens_dir` but not in `mixture` are not used.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np

from langadapt.data.epochs import stage_plan
from langadapt.data.schedule import MixPlan
from langadapt.data.shards import Shard, read_shards
from langadapt.errors import LangadaptError

if TYPE_CHECKING:  # torch is imported where positions are made: reading shards needs only numpy
    import torch


class StreamMismatch(LangadaptError):
    """A saved stream position planned for another number of samples than this stream.

    The stream's length is the stage's steps x its global batch, so with the same steps and mixture
    the global batch changed, which is what a resume on another world size does when the recipe
    leaves `global_batch_size` unset (micro batch x accumulation x world size). The training loop,
    which knows the steps and the world, turns it into the line that names both batches
    (`planning.training.world_change_line`); alone it still says the cause in samples."""

    def __init__(self, saved_samples: int, samples: int) -> None:
        super().__init__(f"stream state does not match this stream: it was saved for {saved_samples:,} samples, "
                         f"this stream plans {samples:,}: the global batch changed (steps x global batch), as on a "
                         "resume on another world size; resume on the world size it was saved with, or set the "
                         "stage's global_batch_size")
        self.saved_samples, self.samples = saved_samples, samples


class SourceProgress(NamedTuple):
    """What a stream has served of each source it draws from: the metrics rows' `tokens_by_source`
    and `epochs_by_source` (a source without a planned epoch count has no entry in `epochs`)."""

    tokens: dict[str, int]
    epochs: dict[str, float]


class TokenStream(Protocol):
    """The data protocol the training loop reads (`PackedStream` below, or SyntheticStream in tests).
    The state dicts are for checkpoints only; what others ask of a stream has a method of its own."""

    def next_batch(self, global_batch_size: int, rank: int = 0, world_size: int = 1) -> np.ndarray: ...
    def position_ids(self, inputs: torch.Tensor) -> torch.Tensor | None: ...  # None: no document masking
    def rows_of_role(self, role: str) -> np.ndarray: ...  # bool per row of the last batch: from a `role` source
    def trained_sources(self) -> list[str]: ...  # the sources it draws samples from
    def progress(self) -> SourceProgress: ...  # tokens and epochs served per source so far
    def state_dict(self) -> dict: ...
    def load_state_dict(self, state: dict) -> None: ...


@dataclass
class _Source:
    name: str
    tokens: np.ndarray
    num_chunks: int
    key: int
    eos_id: int
    role: str = "target"
    perm_epoch: int = -1
    perm: np.ndarray | None = None


def document_positions(inputs: torch.Tensor, eos_id: int) -> torch.Tensor:
    """Each token's position inside its document: 0 at a row's start and after every EOS.

    Packing puts several documents in one row. Given these as `position_ids`, RoPE numbers every
    document from 0 as it was numbered alone, and transformers reads each reset as the start of a
    new sequence: eager/SDPA/flex attention get a block-diagonal causal mask, flash-attention its
    variable-length kernel (`fastpath.model_inputs`). A document cut by the row's start is
    numbered from 0 too: what came before it is in another row, which it cannot see either.
    """
    import torch

    index = torch.arange(inputs.shape[1], device=inputs.device).expand_as(inputs)
    starts = torch.zeros_like(inputs, dtype=torch.bool)
    starts[:, 1:] = inputs[:, :-1] == eos_id
    return index - torch.cummax(torch.where(starts, index, 0), dim=1).values


def _source_key(name: str) -> int:
    """A stable integer for seeding (Python's hash() is salted per process)."""
    return int.from_bytes(hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest(), "big")


def _apportion(tokens: list[float], total_samples: int) -> list[int]:
    """Integer samples per source summing exactly to total_samples (largest remainder)."""
    total = sum(tokens)
    quotas = [t / total * total_samples if total else 0.0 for t in tokens]
    counts = [int(q) for q in quotas]
    order = sorted(range(len(quotas)), key=lambda i: (-(quotas[i] - counts[i]), i))
    for i in order[: total_samples - sum(counts)]:
        counts[i] += 1
    return counts


class PackedStream:
    """Packed [seq_len + 1] samples from several sources, in a fixed and resumable order.

    After `total_samples` (the planned budget, where every source has exactly its planned count)
    the stream goes on in the same proportions, i.e. beyond the planned epochs. Memory: one
    permutation of a source's chunk indices (8 bytes per chunk) per source, made at each pass.
    """

    def __init__(self, sources: list[_Source], targets: list[int], seq_len: int, seed: int, plan: MixPlan,
                 document_masking: bool = False):
        self._sources = sources
        self.document_masking = document_masking
        self._targets = targets
        self._total = sum(targets)
        self.seq_len = seq_len
        self.seed = seed
        self.plan = plan
        self.samples = 0
        self.counts = [0] * len(sources)
        self._last_sources: list[int] = []  # the source of each row of the last batch (rows_of_role)
        eos_ids = {s.eos_id for s in sources}
        if len(eos_ids) != 1:
            raise LangadaptError(f"stream: sources were encoded with different tokenizers (EOS ids {sorted(eos_ids)})")
        self.eos_id = eos_ids.pop()

    @property
    def source_names(self) -> list[str]:
        return [s.name for s in self._sources]

    @property
    def total_samples(self) -> int:
        return self._total

    def next_source(self) -> int:
        """Index of the source of the next sample (largest deficit first; advances the state)."""
        t1 = self.samples + 1
        best, best_deficit = 0, None
        for i, (target, count) in enumerate(zip(self._targets, self.counts)):
            deficit = t1 * target - count * self._total  # ideal - actual, scaled by N: exact
            if best_deficit is None or deficit > best_deficit:
                best, best_deficit = i, deficit
        self.samples += 1
        self.counts[best] += 1
        return best

    def chunk_of(self, source_index: int, k: int) -> int:
        """The chunk that is a source's k-th sample: epoch k // C, fresh permutation per epoch."""
        source = self._sources[source_index]
        epoch, position = divmod(k, source.num_chunks)
        if source.perm_epoch != epoch:
            rng = np.random.default_rng([self.seed, source.key, epoch])
            source.perm = rng.permutation(source.num_chunks).astype(np.int64)
            source.perm_epoch = epoch
        assert source.perm is not None
        return int(source.perm[position])

    def next_samples(self, count: int) -> list[tuple[int, int]]:
        """(source index, chunk) for the next `count` samples; advances the state."""
        picks = []
        for _ in range(count):
            s = self.next_source()
            picks.append((s, self.chunk_of(s, self.counts[s] - 1)))
        return picks

    def next_batch(self, global_batch_size: int, rank: int = 0, world_size: int = 1) -> np.ndarray:
        """This rank's rows of the next global batch: int64 [global_batch_size // world_size, L + 1].

        Every rank advances by the whole global batch (so all ranks keep the same state) but reads
        only its own rows.
        """
        if global_batch_size % world_size:
            raise LangadaptError(
                f"global batch size {global_batch_size} is not divisible by world size {world_size}"
            )
        per_rank = global_batch_size // world_size
        picks = self.next_samples(global_batch_size)[rank * per_rank : (rank + 1) * per_rank]
        self._last_sources = [s for s, _ in picks]
        batch = np.empty((per_rank, self.seq_len + 1), dtype=np.int64)
        for row, (s, chunk) in enumerate(picks):
            start = chunk * self.seq_len
            batch[row] = self._sources[s].tokens[start : start + self.seq_len + 1]
        return batch

    def rows_of_role(self, role: str) -> np.ndarray:
        """bool [rows of the last `next_batch`]: which rows were cut from a source of `role` (its shard's
        role: target, replay or code). Every row comes from one source, so this is exact per row."""
        return np.array([self._sources[s].role == role for s in self._last_sources], dtype=bool)

    def position_ids(self, inputs: torch.Tensor) -> torch.Tensor | None:
        """With document masking, positions restarting after every EOS in `inputs` (a batch's
        `[:, :-1]`), which the training forward turns into attention within each document; None
        without it (the model then numbers every row 0..L-1 and attends across documents)."""
        return document_positions(inputs, self.eos_id) if self.document_masking else None

    def trained_sources(self) -> list[str]:
        """The sources this stream draws samples from: a weight-0 source of the mixture (one kept for
        evaluation) is planned no sample and is not among them."""
        return [name for name, target in zip(self.source_names, self._targets) if target]

    def progress(self) -> SourceProgress:
        """Tokens and passes (epochs) served so far per source drawn from, from the O(1) position: a
        sample counts `seq_len` tokens (the targets it trains), and the passes are the planned epochs
        scaled by how much of the source's planned samples have been served."""
        served = [(name, count, target) for name, count, target in zip(self.source_names, self.counts, self._targets)
                  if target]
        return SourceProgress({name: count * self.seq_len for name, count, _ in served},
                              {name: self.plan.source(name).epochs * count / target for name, count, target in served})

    def state_dict(self) -> dict[str, Any]:
        """The whole position: a few integers (plus what to check on restore)."""
        return {
            "samples": self.samples,
            "counts": dict(zip(self.source_names, self.counts)),
            "seed": self.seed,
            "seq_len": self.seq_len,
            "targets": dict(zip(self.source_names, self._targets)),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Jump to a saved position in O(1): no data is read, no sample is replayed.

        A state of another stream is refused with `StreamMismatch`: one line that names what differs
        (the total samples when only the length changed: the global batch did, see its docstring)."""
        targets = dict(zip(self.source_names, self._targets))
        saved = state.get("targets")
        if isinstance(saved, dict) and saved != targets and set(saved) == set(targets) \
                and sum(saved.values()) != sum(targets.values()):
            raise StreamMismatch(int(sum(saved.values())), int(sum(targets.values())))
        expected = {"seed": self.seed, "seq_len": self.seq_len, "targets": targets}
        for key, value in expected.items():
            if state.get(key) != value:
                raise LangadaptError(
                    f"stream state does not match this stream: {key} is {state.get(key)!r}, expected {value!r}"
                )
        counts = state["counts"]
        if sum(counts.values()) != state["samples"]:
            raise LangadaptError("stream state is inconsistent: per-source counts do not add up to samples")
        self.samples = int(state["samples"])
        self.counts = [int(counts[name]) for name in self.source_names]


def build_stream(
    tokens_dir: Path,
    mixture: dict[str, dict] | None,
    seq_len: int,
    total_samples: int,
    seed: int,
    force: bool = False,
    document_masking: bool = False,
) -> PackedStream:
    """Open the shards of `encode_corpus` and plan `total_samples` samples of `seq_len` tokens
    (`plan_stream`). `document_masking`: see `PackedStream.position_ids`."""
    sources, plan = plan_stream(tokens_dir, mixture, seq_len, total_samples, force)
    targets = _apportion([plan.source(s.name).tokens for s in sources], total_samples)
    return PackedStream(sources, targets, seq_len, seed, plan, document_masking)


def plan_stream(tokens_dir: Path, mixture: dict[str, dict] | None, seq_len: int, total_samples: int,
                force: bool = False) -> tuple[list[_Source], MixPlan]:
    """The shards' sources (memory-mapped, nothing read) and the epochs plan of a stream.

    `mixture` maps source -> {"weight": w} or {"epochs": e} (optionally "max_epochs"); raises
    LangadaptError above 16 epochs unless `force`. `build_stream` plans through it, and so does the
    check of every training stage before the first one trains (`train.stage.plan_epochs_on_shards`): the
    epochs refused before stage 1 are the ones stage 2 would refuse.
    """
    if seq_len < 1 or total_samples < 1:
        raise LangadaptError(f"stream: seq_len ({seq_len}) and total_samples ({total_samples}) must be >= 1")
    tokens_dir = Path(tokens_dir)
    available = read_shards(tokens_dir)
    if mixture is None:
        mixture = {name: {} for name in available}
    if not mixture:
        raise LangadaptError(f"stream: no token shards (*/meta.json) under {tokens_dir}")
    sources = []
    for name in sorted(mixture):
        if name not in available:
            raise LangadaptError(
                f"stream: source {name} has no shards in {tokens_dir} (found: {', '.join(available) or 'none'})"
            )
        sources.append(_open_source(available[name], seq_len))
    # The same function plans `langadapt plan` and the preflight check: they cannot disagree.
    plan = stage_plan(mixture, {s.name: len(s.tokens) for s in sources}, seq_len, total_samples, force=force)
    return sources, plan


def _open_source(shard: Shard, seq_len: int) -> _Source:
    name, num_tokens = shard.folder.name, shard.num_tokens
    if num_tokens < seq_len + 1:
        raise LangadaptError(
            f"stream: source {name} has {num_tokens} tokens, fewer than one sample of {seq_len + 1}"
        )
    return _Source(name=name, tokens=shard.tokens(), num_chunks=(num_tokens - 1) // seq_len, key=_source_key(name),
                   eos_id=int(shard.meta["eos_id"]), role=str(shard.meta.get("role", "target")))
