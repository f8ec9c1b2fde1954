"""The data stage on every core writes what one process writes: the same bytes in every file.

The corpus exercises every way a source is cut into pieces (several files, line spans of a big
uncompressed .jsonl and .txt, Parquet row groups, a gzip file read whole) and everything that
depends on reading order: exact duplicates across files and pieces (the first copy wins), the
held-out cap, the floor, a held-out file read before its train file, `max_docs`, decode errors
replaced, NUL characters. Pieces are made tiny so that a few kB of text make many of them.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest
from helpers.shards import gzip_members

from langadapt.data import documents, pieces, stage
from langadapt.errors import LangadaptError
from langadapt.recipe.data import DataConfig, DataSlice
from langadapt.run.context import StageContext

WORDS = ["og", "i", "det", "som", "er", "på", "en", "til", "av", "for", "med", "har", "ikke", "den", "blåbær"]


def _texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 40))) + f" nr {seed}-{i}." for i in range(n)]


def _jsonl(path: Path, rows: list[dict], compress: bool = False) -> Path:
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


@pytest.fixture()
def corpus(tmp_path: Path) -> list[dict]:
    src = tmp_path / "src"
    src.mkdir()
    a, b = _texts(400, 1), _texts(300, 2)
    dups = a[:40]  # copies of earlier documents, in later files and pieces
    _jsonl(src / "nb-1.jsonl", [{"text": t, "id": f"p/{i % 50}.html"} for i, t in enumerate(a)])
    raw = "".join(json.dumps({"text": t, "id": f"q/{i}"}, ensure_ascii=False) + "\n" for i, t in enumerate(b + dups))
    raw = raw.replace("blåbær", "bl\u00e5b\u00e6r\\u0000", 3)  # NULs inside a few documents
    (src / "nb-2.jsonl").write_bytes(raw.encode() + b'{"text": "bad \xff byte here in nb"}\n')
    _jsonl(src / "nb-3.jsonl.gz", [{"text": t} for t in _texts(120, 3) + dups[:5]], compress=True)
    (src / "en.txt").write_text("\n".join(_texts(500, 4) + a[:3]) + "\n")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": _texts(300, 5) + a[3:6]}), src / "sv.parquet", row_group_size=30)
    _jsonl(src / "da-valid.jsonl", [{"text": t} for t in _texts(20, 6)])
    _jsonl(src / "da.jsonl", [{"text": t} for t in _texts(200, 7) + _texts(5, 6)])
    return [
        {"name": "nb", "path": str(src / "nb-*.jsonl*"), "lang": "nb", "role": "target"},
        {"name": "en", "path": str(src / "en.txt"), "lang": "en", "role": "replay", "txt_unit": "line"},
        {"name": "sv", "path": str(src / "sv.parquet"), "lang": "sv", "role": "replay", "max_docs": 250},
        {"name": "da", "path": str(src / "da.jsonl"), "valid_path": str(src / "da-valid.jsonl"), "lang": "da",
         "role": "replay"},
    ]


def _run(root: Path, sources: list[dict], workers: int, **extra: object) -> tuple[dict, dict[str, bytes]]:
    config = DataConfig.model_validate({"sources": sources, "num_workers": workers, "on_decode_error": "replace",
                                        "valid_fraction": 0.1, "max_valid_docs": 25, "min_valid_documents": 3,
                                        **extra})
    ctx = StageContext(run_dir=root, stage="data", seed=0)
    ctx.out.mkdir(parents=True)
    summary = stage.run(DataSlice(config), ctx)
    files = {str(p.relative_to(ctx.out)): p.read_bytes() for p in sorted(ctx.out.rglob("*")) if p.is_file()}
    return summary, files


def _comparable(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if k != "run"}


@pytest.mark.slow
def test_one_and_several_workers_write_identical_data_folders(tmp_path: Path, corpus: list[dict],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pieces, "PIECE_BYTES", 2048)
    # Many gzip members per file: several workers compress them on threads (`compress_threads`), one
    # worker on the writing thread, and the members must still come out in order.
    monkeypatch.setattr(documents, "BLOCK_BYTES", 2048)
    one, one_files = _run(tmp_path / "one", corpus, 1)
    assert one["pieces"] > 20, "the corpus must be cut into many pieces for this test to mean anything"
    assert gzip_members(one_files["train/nb.jsonl.gz"]) > 20
    for workers in (2, 3):
        many, many_files = _run(tmp_path / f"w{workers}", corpus, workers)
        assert many["run"]["workers"] == workers
        assert many_files.keys() == one_files.keys()
        for name in one_files:
            assert many_files[name] == one_files[name], f"{name} differs with {workers} workers"
        assert _comparable(many) == _comparable(one)
    nb = one["sources"]["nb"]
    assert nb["dropped"]["duplicate"] == 45 and nb["decode_errors_replaced"] == 1
    nul_lines = sum(b"\\u0000" in line for line in (tmp_path / "src" / "nb-2.jsonl").read_bytes().splitlines())
    assert nul_lines >= 2 and nb["dropped"].get("nul_stripped") == nul_lines
    assert one["sources"]["sv"]["docs_read"] == 250  # max_docs across row-group pieces
    assert one["sources"]["en"]["dropped"]["duplicate"] == 3  # copies of nb text, across sources
    assert one["sources"]["da"]["dropped"]["duplicate"] == 5  # held-out file read first
    assert one["sources"]["nb"]["valid_docs"] == 25  # the cap


@pytest.mark.slow
def test_a_bad_line_in_a_late_piece_stops_the_stage_with_its_file_and_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pieces, "PIECE_BYTES", 1024)
    rows = "".join(json.dumps({"text": t}) + "\n" for t in _texts(300, 9))
    bad = tmp_path / "nb.jsonl"
    bad.write_text(rows + "{not json\n" + rows)
    line = rows.count("\n") + 1
    sources = [{"name": "nb", "path": str(bad), "lang": "nb", "role": "target"}]
    for workers in (1, 2):
        with pytest.raises(LangadaptError, match=rf"line {line} of {bad}"):
            _run(tmp_path / f"w{workers}", sources, workers)
        out = tmp_path / f"w{workers}" / "data"
        assert not list(out.rglob("*.jsonl.gz")) and not list(out.rglob("*.tmp"))


def test_line_spans_cut_at_line_ends_and_count_lines(tmp_path: Path) -> None:
    lines = [f"line {i} " + "x" * (i % 37) + "\n" for i in range(2000)]
    path = tmp_path / "a.jsonl"
    path.write_text("".join(lines))
    data = path.read_bytes()
    spans = pieces.line_spans(path, piece_bytes=1000)
    assert len(spans) > 10 and spans[0].start == 0 and spans[-1].stop == len(data)
    for span, following in zip(spans, spans[1:]):
        assert span.stop == following.start and data[span.stop - 1:span.stop] == b"\n"
    for span in spans:
        assert data[:span.start].count(b"\n") + 1 == span.first_line
    gz = tmp_path / "a.jsonl.gz"
    gz.write_bytes(gzip.compress(data))
    assert pieces.line_spans(gz, piece_bytes=1000) == [None]  # a gzip stream is read whole


def test_workers_that_die_are_one_error(tmp_path: Path) -> None:
    from langadapt.data.workers import ordered_batches

    with pytest.raises(LangadaptError, match="died"):
        list(ordered_batches([1, 2, 3, 4], _die_on_three, 2, describe=lambda job: f"job {job}"))


def _die_on_three(job: int):
    import os

    if job == 3:
        os._exit(9)
    yield job
