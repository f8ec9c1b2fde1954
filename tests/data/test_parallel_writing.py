"""What lets the data stage use every core without changing a document it writes.

Three things (session 16): the workers run a whole piece ahead of the process that writes (else they
take turns), a worker that is free takes the next piece (else one may get more than its share), and
the writing process compresses on threads beside the one that decides dedup and the split (else its
one thread is the bottleneck). None may change what the files hold: the text below is the one the
data stage wrote before any of them existed (the demo's golden losses and the held-out split come
from it), and the compressed file is the same bytes whatever number of threads compressed it.
Session 17 changed the compressed bytes on purpose (ISA-L's deflate instead of zlib's, members cut by
bytes): the text, line for line, stayed.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import time
from pathlib import Path

import pytest
from helpers.shards import gzip_members

from langadapt.data import documents
from langadapt.data.documents import DocumentFile, document_line, read_documents, write_documents
from langadapt.data.workers import ordered_batches

EARLIER_RUNS_TEXT_SHA256 = "1487d63639be1d747ce620d0e4eedb351216a6f006a30bbf0eb12d0a3fa65683"
"""The decompressed text of the file `_docs()` gave at commit a9d87cc (json.dumps lines, zlib members)."""


def _docs() -> list[dict]:
    # Non-ASCII text: a line's length in bytes and in characters differ.
    return [{"id": f"nb-{i}", "text": f"blåbærsyltetøy nr {i} " * (i % 37 + 1) + "æøå €", "lang": "nb",
             "source": "nb", "role": "target"} for i in range(300)]


def _write(path: Path, threads: int) -> bytes:
    if threads == 0:
        assert write_documents(path, _docs()) == 300  # the other writer of data-stage files
    else:
        with DocumentFile(path, threads) as out:
            for doc in _docs():
                out.write(document_line(doc), len(doc["text"]))
        assert out.count == 300 and out.chars == sum(len(d["text"]) for d in _docs())
    return path.read_bytes()


def test_document_files_keep_the_text_of_earlier_runs_and_one_set_of_bytes_whatever_compresses_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(documents, "BLOCK_BYTES", 1000)
    files = {threads: _write(tmp_path / f"{threads}.jsonl.gz", threads) for threads in (0, 1, 3)}
    assert gzip_members(files[0]) > 20, "many blocks in flight at once, or the test proves nothing about their order"
    assert files[1] == files[0] and files[3] == files[0]
    assert hashlib.sha256(gzip.decompress(files[0])).hexdigest() == EARLIER_RUNS_TEXT_SHA256
    assert list(read_documents(tmp_path / "3.jsonl.gz")) == _docs()


def test_a_document_line_is_the_json_modules_for_every_code_point() -> None:
    """orjson writes the lines (a seventh of json's CPU); every code point must come out as json
    spells it, or a file's text would differ from earlier runs'. Lone surrogates go through json."""
    every = "".join(chr(point) for point in range(0x110000) if not 0xD800 <= point <= 0xDFFF)
    for start in range(0, len(every), 65536):
        doc = {"id": "x", "text": every[start:start + 65536], "n": 3, "ok": None}
        assert document_line(doc) == (json.dumps(doc, ensure_ascii=False) + "\n").encode("utf-8")
    lone = {"id": "x", "text": "a\ud800b"}
    with pytest.raises(UnicodeEncodeError):  # as json.dumps(...).encode("utf-8") always did
        document_line(lone)


def test_a_data_file_line_orjson_refuses_is_read_by_json_or_named(tmp_path: Path) -> None:
    path = tmp_path / "nb.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"id": "a", "text": "x\\ud800y"}\n{"id": \n'))
    documents_read = read_documents(path)
    assert next(documents_read) == {"id": "a", "text": "x\ud800y"}
    with pytest.raises(documents.LangadaptError, match=r"nb.jsonl.gz: line 2 is not a document"):
        next(documents_read)


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
