"""Opening a user's input file (`inputs.files.open_input`) and the preflight's probe of one
(`inputs.compression.input_problem`): a FIFO, device or folder is refused by its mode without a
blocking open, and an empty, mislabelled or corrupt compressed file is said as one line."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest
import zstandard

from langadapt.errors import LangadaptError
from langadapt.inputs.compression import input_problem
from langadapt.inputs.files import open_input


def test_input_problem_names_each_kind_of_bad_input_file(tmp_path: Path) -> None:
    fifo, folder = tmp_path / "fifo.jsonl", tmp_path / "folder.jsonl"
    os.mkfifo(fifo)
    folder.mkdir()
    files = {"empty.txt": b"", "fake.jsonl.zst": b'{"text": "a"}\n', "fine.jsonl.zst": zstandard.compress(b"a\n"),
             "nothing.jsonl.gz": gzip.compress(b""), "broken.jsonl.gz": b"\x1f\x8b\x09garbage", "fine.txt": b"a\n"}
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    assert input_problem(fifo) == f"{fifo} is not a regular file (a FIFO)"  # returns: never opened blocking
    assert input_problem(folder) == f"{folder} is not a regular file (a directory)"
    assert input_problem("/dev/null") == "/dev/null is not a regular file (a character device)"
    assert input_problem(tmp_path / "empty.txt") == f"{tmp_path / 'empty.txt'} is empty"
    assert input_problem(tmp_path / "fake.jsonl.zst") == f"{tmp_path / 'fake.jsonl.zst'} is named .zst but is not zstd data"
    assert "decompresses to nothing" in input_problem(tmp_path / "nothing.jsonl.gz")
    assert input_problem(tmp_path / "broken.jsonl.gz").startswith(f"{tmp_path / 'broken.jsonl.gz'} is not valid gzip data")
    assert input_problem(tmp_path / "fine.jsonl.zst") is None and input_problem(tmp_path / "fine.txt") is None


def test_open_input_refuses_a_fifo_with_the_key(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(LangadaptError, match=r"^data\.sources\[0\]\.path: .*fifo is not a regular file \(a FIFO\)$"):
        open_input(fifo, "data.sources[0].path")
