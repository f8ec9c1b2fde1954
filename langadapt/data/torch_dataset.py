"""The packed stream as a `torch.utils.data.IterableDataset`, for HF `Trainer`, TRL and plain loops.

    from langadapt import PackedIterableDataset, stream_from_texts
    train = PackedIterableDataset(stream_from_texts(texts, tokenizer, "tokens/", seq_len=512,
                                                    total_samples=steps * batch_size))
    Trainer(model=model, args=TrainingArguments(max_steps=steps, ...), train_dataset=train).train()

Each item is `{"input_ids", "labels"}` (int64, `seq_len` tokens; `labels` equal `input_ids`,
since Hugging Face models shift labels themselves), in the stream's order. A stream built with
`document_masking=True` adds `"position_ids"`, restarting at 0 after every EOS: transformers reads
the resets as packed sequences and keeps attention inside each document (SDPA/flex/eager get a
block-diagonal mask, flash-attention its variable-length kernel), in HF `Trainer` as in `fit`,
but only without a KV cache: set `model.config.use_cache = False` before training. With a cache
(transformers' default, created in training mode too) the resets only renumber RoPE and attention
silently crosses documents (checked in tests/data/test_library_data.py; `fit` passes use_cache=False).

Who reads which sample: the stream's samples are dealt round-robin to the consumers, one per
(rank, DataLoader worker): consumer c = rank * num_workers + worker gets samples c, c + n, c + 2n,
... of n = world_size * num_workers. So every sample is read exactly once, whatever the number of
workers. `rank` and `world_size` default to a single consumer per process, which is right for HF
`Trainer`/`accelerate`: on several GPUs accelerate reads an iterable dataset on rank 0 and sends
each rank its share of the batch (`dispatch_batches`, its default for iterable datasets). In your
own DDP loop without accelerate, pass `rank`/`world_size` so each rank reads only its share.

Resume: without DataLoader workers the stream advances with the iteration, so
`stream.state_dict()` is the position after the samples read so far (a checkpoint stores it,
`load_state_dict` restores it in O(1)). Worker processes advance their own copies; there, resume
by loading the saved state into the stream before wrapping it. One pass yields the stream's
planned `total_samples`; iterating again continues the stream (its order is endless).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import IterableDataset, get_worker_info

from langadapt.data.stream import PackedStream
from langadapt.errors import LangadaptError


class PackedIterableDataset(IterableDataset):
    """A `PackedStream` as an iterable of `{"input_ids", "labels"[, "position_ids"]}` LongTensor[L] items."""

    def __init__(self, stream: PackedStream, rank: int = 0, world_size: int = 1) -> None:
        if not 0 <= rank < world_size:
            raise LangadaptError(f"PackedIterableDataset: rank {rank} is not in [0, world_size {world_size})")
        self.stream, self.rank, self.world_size = stream, rank, world_size

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        info = get_worker_info()
        workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
        consumers, me = self.world_size * workers, self.rank * workers + worker
        # A pass is the planned budget, rounded down to whole rounds over the consumers, so that
        # every consumer yields the same number of items (ranks must agree on the step count).
        for _ in range(self.stream.total_samples // consumers):
            # Every consumer advances by a whole round (all keep the same position) and reads
            # only its own row: next_batch's contract for ranks, reused for workers.
            row = torch.from_numpy(self.stream.next_batch(consumers, me, consumers)[0, :-1])
            item = {"input_ids": row, "labels": row.clone()}
            positions = self.stream.position_ids(row[None])
            if positions is not None:
                item["position_ids"] = positions[0]
            yield item
