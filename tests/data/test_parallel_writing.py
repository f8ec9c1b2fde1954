"""What lets the data stage use every core without changing a byte it writes.

Three things (session 16): the workers run a whole piece ahead of the process that writes (else they
take turns), a worker that is free takes the next piece (else one may get more than its share), and
the writing process compresses on threads beside the one that decides dedup and the split (else its
one thread is the bottleneck). None may change the files: the bytes below are those the data stage
wrote before any of them existed, and the run fingerprints and the demo's golden losses are
computed from them.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest
from helpers.shards import gzip_members

from langadapt.data import documents
from langadapt.data.documents import DocumentFile, document_line, read_documents, write_documents
from langadapt.data.workers import ordered_batches

EARLIER_RUNS_SHA256 = "80c05c059ef5584b17a73e7f0888612d8248087076833c37fc6d63c40e32096b"
"""The file `_docs()` gave with `BLOCK_CHARS` = 1000 at commit a9d87cc (lines encoded and compressed
on the writing thread, blocks cut by characters)."""


def _docs() -> list[dict]:
    # Non-ASCII text: blocks are cut by characters, which a cut by bytes would move.
    return [{"id": f"nb-{i}", "text": f"blåbærsyltetøy nr {i} " * (i % 37 + 1) + "æøå €", "lang": "nb",
             "source": "nb", "role": "target"} for i in range(300)]


@pytest.mark.parametrize("threads", [0, 1, 3])
def test_document_files_keep_the_bytes_of_earlier_runs_whatever_compresses_them(
        tmp_path: Path, threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(documents, "BLOCK_CHARS", 1000)
    path = tmp_path / "nb.jsonl.gz"
    if threads == 0:
        assert write_documents(path, _docs()) == 300  # the other writer of data-stage files
    else:
        with DocumentFile(path, threads) as out:
            for doc in _docs():
                line = document_line(doc)
                out.write(line.encode("utf-8"), len(line), len(doc["text"]))
        assert out.count == 300 and out.chars == sum(len(d["text"]) for d in _docs())
    data = path.read_bytes()
    assert gzip_members(data) > 20, "many blocks in flight at once, or the test proves nothing about their order"
    assert hashlib.sha256(data).hexdigest() == EARLIER_RUNS_SHA256
    assert list(read_documents(path)) == _docs()


def _job(job: tuple[int, int, str]):
    index, batches, folder = job
    (Path(folder) / f"{index}.taken").touch()
    if index == 0:  # keeps its worker here until another worker has taken job 1
        assert _appears(Path(folder) / "1.taken", 60)
    for number in range(batches):
        yield index, number
    (Path(folder) / f"{index}.done").touch()


def _appears(path: Path, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists():
            return True
        time.sleep(0.05)
    return path.exists()


@pytest.mark.slow
@pytest.mark.parametrize(("ahead", "runs_ahead"), [(5, True), (1, False)])
def test_a_worker_finishes_its_job_while_the_parent_is_still_at_an_earlier_one(
        tmp_path: Path, ahead: int, runs_ahead: bool) -> None:
    jobs = [(index, 5, str(tmp_path)) for index in range(2)]
    stream = ordered_batches(jobs, _job, 2, ahead=ahead)
    try:
        first = next(stream)  # the parent holds job 0 here; job 1 is the other worker's
        # Room for its 5 batches: it finishes job 1 now. Room for 1: it waits until the parent gets there.
        assert _appears(tmp_path / "1.done", 60 if runs_ahead else 2) == runs_ahead
        batches = [batch for _, batch in [first, *stream]]
    finally:
        stream.close()
    assert batches == [(index, number) for index in range(2) for number in range(5)]
    assert (tmp_path / "1.done").exists()


def _long_first(job: tuple[int, str]):
    index, folder = job
    if index == 0:  # a long piece: the other worker reads all the short ones meanwhile
        assert _appears(Path(folder) / "2.done", 60), "job 2 waited for the worker of job 0"
    yield index
    (Path(folder) / f"{index}.done").touch()


@pytest.mark.slow
def test_a_free_worker_takes_the_next_job_whoever_took_the_previous_ones(tmp_path: Path) -> None:
    # A fixed plan (job i to worker i % 2) would leave job 2 to the worker still in job 0.
    jobs = [(index, str(tmp_path)) for index in range(4)]
    assert [batch for _, batch in ordered_batches(jobs, _long_first, 2, ahead=8)] == [0, 1, 2, 3]
