"""Read back what the trackers wrote, from their own offline files: TensorBoard event files (its
EventAccumulator) and W&B offline runs (its protobuf records)."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path


def tensorboard_events(log_dir: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    return events


def tensorboard_scalars(log_dir: Path) -> dict[tuple[str, int], float]:
    events = tensorboard_events(log_dir)
    return {(tag, e.step): e.value for tag in events.Tags()["scalars"] for e in events.Scalars(tag)}


def wandb_records(out: Path, kind: str) -> Iterator:
    """Records of type `kind` ("history", "run", "summary", ...) of every offline run under `out`
    (a resume adds a run folder), from W&B's LevelDB-style log: 7-byte file header, then
    records of crc32 u32, length u16, type u8, cut at 32 KiB blocks."""
    from wandb.proto import wandb_internal_pb2

    for path in sorted((out / "wandb").glob("offline-run-*/run-*.wandb")):
        data, pos, block, pending = path.read_bytes(), 7, 32768, b""
        while pos + 7 <= len(data):
            if block - pos % block < 7:
                pos += block - pos % block  # block trailer
                continue
            _, length, chunk = struct.unpack("<IHB", data[pos : pos + 7])
            pending, pos = pending + data[pos + 7 : pos + 7 + length], pos + 7 + length
            if chunk in (1, 4):  # FULL or LAST chunk
                record = wandb_internal_pb2.Record()
                record.ParseFromString(pending)
                pending = b""
                if record.WhichOneof("record_type") == kind:
                    yield getattr(record, kind)


def _items(items) -> dict[str, object]:
    return {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in items}


def wandb_scalars(out: Path) -> dict[tuple[str, int], float]:
    scalars: dict[tuple[str, int], float] = {}
    for history in wandb_records(out, "history"):
        items = _items(history.item)
        step = int(items.pop("_step"))
        scalars.update({(k, step): float(v) for k, v in items.items() if not k.startswith("_")})
    return scalars


def wandb_config(out: Path) -> dict[str, object]:
    """The run's configuration as `wandb.init(config=...)` received it (the first run record)."""
    run = next(wandb_records(out, "run"))
    return {k: v for k, v in _items(run.config.update).items() if k != "_wandb"}


def wandb_summary(out: Path) -> dict[str, object]:
    summary: dict[str, object] = {}
    for record in wandb_records(out, "summary"):
        summary.update(_items(record.update))
    return summary
