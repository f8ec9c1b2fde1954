"""Reading a Hugging Face dataset source: a folder saved with save_to_disk, or a Hub dataset streamed.

A module of its own because `datasets` does the reading: what is ours is how its rows become
documents (`records.record_document`), where a stream may fail mid-way, and its many error types
said as one line that names the recipe key to change (`_hub_error`).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from pathlib import Path

from langadapt.data.records import Document, record_document
from langadapt.errors import LangadaptError
from langadapt.inputs.text import Bound
from langadapt.recipe.data import SourceConfig

log = logging.getLogger("langadapt.data")


def iter_hf(source: SourceConfig, path: Path | str, disk: bool, bound: Bound,
            shard: tuple[int, int] | None = None) -> Iterator[Document]:
    """A `datasets` dataset saved with save_to_disk, or a Hub dataset (id or local folder) streamed;
    with `shard` (index, count), only that contiguous shard of a saved one, rows numbered as in the whole.

    `datasets` holds a row before it is seen here: the bound keeps such a document out of the data
    stage's files (and so out of every later stage), not out of `datasets`' own memory."""
    import datasets

    try:
        if disk:
            dataset = datasets.load_from_disk(str(path))
            if isinstance(dataset, datasets.DatasetDict):
                if source.split not in dataset:
                    raise LangadaptError(f"source {source.name}: split {source.split!r} not in {path} "
                                         f"(splits: {', '.join(dataset)})")
                dataset = dataset[source.split]
        else:
            if not source.pinned:
                log.warning("source %s: %s is not pinned to a commit (revision: %s): a rerun may read other data",
                            source.name, path, source.revision or "none")
            dataset = datasets.load_dataset(str(path), name=source.subset, revision=source.revision,
                                            data_files=source.data_files, split=source.split,
                                            streaming=source.streaming)
    except LangadaptError:
        raise
    except Exception as err:  # datasets raises many types (FileNotFoundError, hub errors, ...)
        raise LangadaptError(f"source {source.name}: {_hub_error(source, path, err)}") from None
    first_row = 0
    if shard is not None and shard[1] > 1:
        index, count = shard
        first_row = sum(_shard_rows(len(dataset), count, i) for i in range(index))
        dataset = dataset.shard(num_shards=count, index=index, contiguous=True)
    columns = None if disk else dataset.column_names  # None also when a stream's schema is not known up front
    if columns is not None and source.text_field not in columns:
        raise LangadaptError(f"source {source.name}: text_field {source.text_field!r} is not a column of {path} "
                             f"(columns: {', '.join(columns)})")
    rows = iter(dataset)
    for i in itertools.count(first_row):
        try:
            record = next(rows)
        except StopIteration:
            return
        except Exception as err:  # a stream fails mid-way: a bad shard, a dropped connection
            raise LangadaptError(f"source {source.name}: reading row {i} of {path} failed: "
                                 f"{' '.join(str(err).split())}") from None
        doc = record_document(source, path, record, f"row {i}")
        if bound.over(doc.text):
            raise bound.refuse(f"source {source.name}", f"row {i}", path, f"field {source.text_field!r}")
        yield doc


def _shard_rows(rows: int, count: int, index: int) -> int:
    """Rows in contiguous shard `index` of `count` (as `datasets.Dataset.shard(contiguous=True)` cuts)."""
    div, mod = divmod(rows, count)
    return div + (1 if index < mod else 0)


def _hub_error(source: SourceConfig, path: Path | str, err: Exception) -> str:
    """`datasets`' message on one line, blamed on the recipe key that caused it."""
    message = " ".join(str(err).split())
    if "BuilderConfig" in message or "Config name is missing" in message:
        listed = message.partition("Available: ")[2] or message.partition("among the available configs: ")[2]
        available = listed.split(" Example")[0].strip("[] ").replace("'", "")
        what = f"subset {source.subset!r} is not a config of" if source.subset else "set subset: a config of"
        return f"{what} {path} (available: {available})"
    if "Bad split" in message or "Unknown split" in message:
        return f"split {source.split!r} is not in {path} ({message})"
    if "Revision" in message or "revision" in message:
        return f"revision {source.revision!r} of {path}: {message}"
    return f"cannot load dataset {path}: {message}"
