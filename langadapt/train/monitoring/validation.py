"""Held-out loss and bits per byte per language, every N steps of training.

Over-repetition of a small target corpus (the risk the repetition schedule manages) shows first
as held-out loss that stops falling and turns up while training loss still falls; the evaluate
stage only sees the end of the run. So the loop scores a FIXED set of held-out windows per
language every `validation.every_steps` steps:

- the windows are `seq_len + 1` tokens cut at chunk boundaries of the held-out shards the
  tokenizer stage writes (`tokens/valid/<source>/`), exactly as training cuts its own shards,
  `tokens_per_lang` tokens per language spread evenly over the shard (several documents, not
  the first one), chosen once: every point of the curve scores the same tokens;
- loss = mean next-token cross-entropy (nats, the training loss's unit); bits per byte =
  summed NLL / UTF-8 bytes of the scored tokens / ln 2, the bytes counted once by decoding each
  window's targets. These are packed windows, as in training (context may cross a document
  boundary, EOS is scored), so the numbers track the training loss; the evaluate stage's
  per-document bpb (lm-eval's definition) is the one to compare models with;
- every rank scores its share (rows r, r + W, ...) padded to the same count, and one all-reduce
  sums the totals: under ZeRO-3 and FSDP every rank must run the same forward passes, because each
  one gathers the partitioned weights collectively. The forward is the engine's own
  (`Engine.forward_model`: its wrapper gathers the weights, and the loss is the training loss,
  fused on GPUs where training's is). No gradients; the model is put back in train mode.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from langadapt.data.shards import Shard, read_shards
from langadapt.errors import LangadaptError
from langadapt.recipe.train import ValidationConfig

log = logging.getLogger("langadapt.train")

@dataclass(frozen=True)
class HeldOutSet:
    """One language's fixed validation windows and the UTF-8 bytes their targets encode."""

    lang: str
    windows: np.ndarray
    """int64 [n, seq_len + 1]: inputs are [:, :-1], targets [:, 1:]."""
    target_bytes: int


def _window_starts(num_tokens: int, seq_len: int, budget_tokens: int) -> np.ndarray:
    """Chunk starts spread evenly over a shard: ceil(budget / seq_len) windows, at most all of them."""
    chunks = (num_tokens - 1) // seq_len
    count = min(chunks, math.ceil(budget_tokens / seq_len))
    return np.unique(np.linspace(0, chunks - 1, count).round().astype(np.int64)) * seq_len


def load_held_out(valid_dir: Path, sources: list[str] | None, langs: list[str] | None, seq_len: int,
                  tokens_per_lang: int, decode: Callable[[list[int]], str]) -> list[HeldOutSet]:
    """The validation windows of each language from the held-out shards under `valid_dir`.

    `sources`: only these sources' shards (None: all); `langs`: only these languages (None: every
    language of those sources). A language's budget is split evenly over its sources; a shard
    shorter than one window is skipped with a warning. `decode` maps token ids to text (the
    tokenizer that wrote the shards), for the byte count of bits per byte.
    """
    by_lang: dict[str, list[Shard]] = {}
    for shard in read_shards(Path(valid_dir)).values():
        meta = shard.meta
        if (sources is None or meta["source"] in sources) and (langs is None or meta["lang"] in langs):
            by_lang.setdefault(meta["lang"], []).append(shard)
    sets = []
    for lang, found in sorted(by_lang.items()):
        shards = []
        for shard in found:
            if shard.num_tokens >= seq_len + 1:
                shards.append(shard)
            else:
                log.warning("validation: held-out shard %s has %d tokens, fewer than one window of %d; skipped",
                            shard.folder, shard.num_tokens, seq_len + 1)
        windows = []
        for shard in shards:
            tokens = shard.tokens()
            starts = _window_starts(shard.num_tokens, seq_len, math.ceil(tokens_per_lang / len(shards)))
            windows += [np.asarray(tokens[s : s + seq_len + 1], dtype=np.int64) for s in starts]
        if windows:
            stacked = np.stack(windows)
            n_bytes = sum(len(decode(row[1:].tolist()).encode("utf-8")) for row in stacked)
            sets.append(HeldOutSet(lang, stacked, n_bytes))
    missing = sorted(set(langs or []) - {s.lang for s in sets})
    if missing:
        raise LangadaptError(f"validation.langs: no usable held-out shards for {', '.join(missing)} under {valid_dir}")
    return sets


class Validation:
    """Scores the held-out sets when due: `fit` calls `maybe_run` after every step, on every rank."""

    last: dict | None = None
    """The last validation row (the stage summary's `validation`); None before the first."""

    def __init__(self, sets: list[HeldOutSet], config: ValidationConfig, micro_batch_size: int,
                 precision: str = "fp32", rank: int = 0, world_size: int = 1,
                 position_ids: Callable[[torch.Tensor], torch.Tensor | None] = lambda inputs: None) -> None:
        """`position_ids`: the training stream's (`PackedStream.position_ids`), so that with
        data.document_masking the held-out windows are attended per document, as in training."""
        self.sets, self.every, self.micro_batch_size = sets, config.every_steps, micro_batch_size
        self.precision, self.rank, self.world_size = precision, rank, world_size
        self.position_ids = position_ids

    def due(self, step: int, total_steps: int) -> bool:
        return bool(self.sets) and self.every is not None and (step % self.every == 0 or step == total_steps)

    def maybe_run(self, step: int, total_steps: int, engine) -> dict | None:
        """The row `{"step", "valid": {lang: {loss, bits_per_byte, tokens}}, "valid_seconds"}` of step
        `step` when it is due (every `every_steps`-th and the last), else None. Every rank calls it:
        scoring is collective (under ZeRO-3 and FSDP each forward gathers the weights)."""
        if not self.due(step, total_steps):
            return None
        self.last = {"step": step, **self.run(engine)}
        return self.last

    def _my_rows(self, windows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's rows (r, r + W, ...), padded to the same count on every rank (targets -100)."""
        per_rank = math.ceil(len(windows) / self.world_size)
        mine = torch.from_numpy(windows[self.rank :: self.world_size])
        inputs = torch.zeros(per_rank, windows.shape[1] - 1, dtype=torch.long)
        targets = torch.full_like(inputs, -100)
        inputs[: len(mine)], targets[: len(mine)] = mine[:, :-1], mine[:, 1:]
        return inputs, targets

    @torch.no_grad()
    def run(self, engine) -> dict:
        """Score every set now (all ranks call this together: it ends in one all-reduce)."""
        started, device = time.perf_counter(), engine.device
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.precision)
        was_training = engine.model.training
        engine.model.eval()
        local: list[float] = []
        try:
            with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                for held_out in self.sets:
                    inputs, targets = self._my_rows(held_out.windows)
                    nll = 0.0
                    for x, y in zip(inputs.split(self.micro_batch_size), targets.split(self.micro_batch_size)):
                        # the engine's loss (mean over non-padding targets): its wrapper gathers
                        # sharded weights; a batch of padding only still runs, as every rank must
                        positions = self.position_ids(x)
                        mean = float(engine.forward_model(x.to(device), y.to(device),
                                                          None if positions is None else positions.to(device)))
                        scored = int((y != -100).sum())
                        nll += mean * scored if scored else 0.0
                    local += [nll, float((targets != -100).sum())]
        finally:
            engine.model.train(was_training)
        totals = engine.all_reduce_sum(local)
        per_lang = {}
        for i, held_out in enumerate(self.sets):
            nll, tokens = totals[2 * i], totals[2 * i + 1]
            per_lang[held_out.lang] = {"loss": nll / tokens, "tokens": int(tokens),
                                       "bits_per_byte": nll / held_out.target_bytes / math.log(2)}
        return {"valid": per_lang, "valid_seconds": time.perf_counter() - started}
