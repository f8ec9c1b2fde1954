"""Datasets for the task YAMLs in this folder, read from local JSONL files: no Hub, no cache.

`dataset_path: json` with `dataset_kwargs: {data_files: ...}` would do the same, but relative
`data_files` resolve against the working directory, so a task would work only when lm-eval is
started from one folder. Here they resolve against this file's folder, so the tasks run from
anywhere: under `langadapt eval` (suites name this folder as `include_path`) and under plain
`lm_eval --include_path eval/lm_eval_tasks`. Standard library and `datasets` only (lm-eval's own
dependency), so the tasks do not need langadapt installed.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import datasets

HERE = Path(__file__).resolve().parent


def jsonl(data_files: dict[str, str] | None = None, **_: Any) -> datasets.DatasetDict:
    """{split: Dataset} from `data_files` ({split: JSONL path relative to this folder, or .jsonl.gz}).

    lm-eval passes the task's `metadata` as keyword arguments too; they are ignored."""
    if not data_files:
        raise ValueError("local_data.jsonl: the task needs dataset_kwargs: {data_files: {SPLIT: FILE}}")
    splits = {}
    for split, name in data_files.items():
        path = HERE / name
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8-sig") as f:
            splits[split] = datasets.Dataset.from_list([json.loads(line) for line in f if line.strip()])
    return datasets.DatasetDict(splits)
