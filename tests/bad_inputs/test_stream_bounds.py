"""Streams bounded by design (issue 32 item 1): every reader of user text goes through
`langadapt.inputs.text`, so for txt/jsonl/parquet x none/gz/zst

- a document over the bound is refused while it is read, costing the bound plus a chunk of
  memory, not the document (a one-line file that expands to gigabytes);
- a truncated or corrupt compressed file is one LangadaptError naming it, never a shorter corpus:
  a reader returns all documents or raises (plain files carry no end mark: a cut at a line end is
  undetectable there, a cut mid-line shows in JSON as a last line without newline);
- a zstd file whose frames carry no checksum is said, since a flipped byte in it can decode to
  other text.

Before: a one-line 256 MB .zst was read whole (MemoryError under a cap), a .jsonl.zst from a
streaming writer that was never closed lost the rest of the corpus with exit 0, and cut mid-line
it was blamed on JSON. Generated cases are derandomised (the same every run, reproducible).
"""

from __future__ import annotations

import codecs
import gzip
import io
import json
import logging
import tracemalloc
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from langadapt.data.documents import read_documents, write_documents
from langadapt.data.sources import iter_texts
from langadapt.errors import LangadaptError
from langadapt.evaluation.task_data import read_minimal_pairs, read_texts
from langadapt.inputs.files import MAX_DOCUMENT_BYTES_CEILING
from langadapt.inputs.text import CHUNK_BYTES, Bound, iter_lines, read_input_text
from langadapt.recipe.data import DataConfig, SourceConfig
from tests.helpers.cli import run_cli

FORMATS = ("txt", "jsonl", "parquet")
COMPRESSIONS = ("none", "gz", "zst")
BOUND = 1 << 20
PARQUET_CODECS = {"none": "none", "gz": "gzip", "zst": "zstd"}
PROPERTY = settings(max_examples=25, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

words = st.text(alphabet="abcdefghij æøåÆØÅ,.😀", min_size=1, max_size=60).filter(lambda t: t.strip() == t != "")
corpora = st.lists(words, min_size=2, max_size=40)


def compress(data: bytes, compression: str, checksum: bool = True) -> bytes:
    if compression == "gz":
        return gzip.compress(data, mtime=0)
    if compression == "zst":
        return zstandard.ZstdCompressor(write_checksum=checksum).compress(data)
    return data


def corpus_file(folder: Path, fmt: str, compression: str, texts: list[str], checksum: bool = True) -> Path:
    """`texts` as one file: txt one document per line, jsonl, or parquet (then `compression` is
    Parquet's own page codec: a Parquet file compressed whole cannot be streamed)."""
    if fmt == "parquet":
        path = folder / "corpus.parquet"
        pq.write_table(pa.table({"text": texts}), path, compression=PARQUET_CODECS[compression],
                       write_page_checksum=checksum, row_group_size=max(1, len(texts) // 3))
        return path
    data = "".join((json.dumps({"text": t}) if fmt == "jsonl" else t) + "\n" for t in texts).encode()
    path = folder / f"corpus.{fmt}{'' if compression == 'none' else '.' + compression}"
    path.write_bytes(compress(data, compression, checksum))
    return path


def read(path: Path, bound: int = BOUND, txt_unit: str = "line") -> list[str]:
    source = SourceConfig(name="nb", path=str(path), lang="nb", txt_unit=txt_unit)
    return list(iter_texts(source, [path], "error", Counter(), bound))


def refused(path: Path, bound: int = BOUND, txt_unit: str = "line") -> str:
    """The one-line refusal reading `path` gives; fails the test when it reads without one."""
    with pytest.raises(LangadaptError) as err:
        read(path, bound, txt_unit)
    message = str(err.value)
    assert "\n" not in message and str(path) in message, message
    return message


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_a_sound_file_reads_back_whole(tmp_path: Path, fmt: str, compression: str) -> None:
    texts = [f"dokument {i}: fjell og fjorder " * (i % 7 + 1) for i in range(500)]
    assert read(corpus_file(tmp_path, fmt, compression, texts)) == texts


# --- truncated: all documents or an error -------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("compression", COMPRESSIONS)
@PROPERTY
@given(texts=corpora, cut=st.floats(min_value=0, max_value=1, exclude_max=True))
def test_a_truncated_file_is_an_error_or_loses_nothing_it_could_tell(
    tmp_path: Path, fmt: str, compression: str, texts: list[str], cut: float
) -> None:
    path = corpus_file(tmp_path, fmt, compression, texts)
    whole = path.read_bytes()
    path.write_bytes(whole[: max(1, int(len(whole) * cut))])
    if fmt == "parquet" or compression != "none":  # an end mark (gzip, zstd, Parquet's footer)
        message = refused(path)
        assert "cannot read" in message or "not" in message, message
        return
    try:
        got = read(path)
    except LangadaptError as err:  # a JSON line or a character cut mid-way: named as a possible truncation
        assert "is the file truncated?" in str(err) and str(path) in str(err), err
        return
    assert got == texts[: len(got)] or got[:-1] == texts[: len(got) - 1] and texts[len(got) - 1].startswith(got[-1])


@pytest.mark.parametrize("fmt", ("txt", "jsonl"))
def test_a_zstd_stream_cut_at_a_line_end_is_refused_not_shortened(tmp_path: Path, fmt: str) -> None:
    """The reported case: a streaming writer flushed whole lines and was never closed (a killed
    job); the frame has no last block. zstandard's reader stops quietly there; we do not."""
    texts = [f"linje {i}" for i in range(2000)]
    data = "".join((json.dumps({"text": t}) if fmt == "jsonl" else t) + "\n" for t in texts).encode()
    buffer = io.BytesIO()
    writer = zstandard.ZstdCompressor().stream_writer(buffer, closefd=False)
    writer.write(data[: len(data) // 2].rpartition(b"\n")[0] + b"\n")
    writer.flush()  # a block boundary at a line end, no frame end
    path = tmp_path / f"cut.{fmt}.zst"
    path.write_bytes(buffer.getvalue())
    assert zstandard.ZstdDecompressor().stream_reader(io.BytesIO(path.read_bytes()), read_across_frames=True).read()
    message = refused(path)
    assert f"truncated at byte {path.stat().st_size}" in message and "frame 1 (from byte 0) has no end" in message


def test_a_gzip_cut_short_names_the_file_and_its_end(tmp_path: Path) -> None:
    path = corpus_file(tmp_path, "jsonl", "gz", [f"tekst {i}" for i in range(3000)])
    path.write_bytes(path.read_bytes()[:-4])  # the trailer's length field cut: the text itself is all there
    assert f"truncated at byte {path.stat().st_size}" in refused(path)


# --- flipped bytes: a checksum catches them, and a missing one is said --------------------------

@pytest.mark.parametrize("fmt", ("txt", "jsonl"))
@pytest.mark.parametrize("compression,checksum", [("gz", True), ("zst", True), ("zst", False)])
@PROPERTY
@given(texts=corpora, where=st.floats(min_value=0, max_value=1, exclude_max=True), bit=st.integers(0, 7))
def test_a_flipped_byte_is_caught_or_said_never_silent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, fmt: str, compression: str, checksum: bool,
    texts: list[str], where: float, bit: int
) -> None:
    path = corpus_file(tmp_path, fmt, compression, texts, checksum)
    data = bytearray(path.read_bytes())
    data[int(len(data) * where)] ^= 1 << bit
    path.write_bytes(bytes(data))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="langadapt.data"):
        try:
            got = read(path)
        except LangadaptError as err:
            assert str(path) in str(err) and "\n" not in str(err)
            return
    warned = [r.getMessage() for r in caplog.records if "carry no checksum" in r.getMessage()]
    assert got == texts or (not checksum and len(warned) == 1 and str(path) in warned[0]), (got, texts)


def test_a_checksummed_zstd_file_is_not_warned_about(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="langadapt.data"):
        assert read(corpus_file(tmp_path, "jsonl", "zst", ["a", "b"], checksum=True)) == ["a", "b"]
        assert not caplog.records
        read(corpus_file(tmp_path, "txt", "zst", ["a", "b"], checksum=False))
    assert "1 of its 1 zstd frames carry no checksum" in caplog.records[0].getMessage()


def test_a_frame_whose_content_size_lies_is_refused(tmp_path: Path) -> None:
    """The header's content size (a 1-byte field here) is checked by libzstd against what decodes."""
    data = b"".join(b"linje %d\n" % i for i in range(20))
    frame = bytearray(zstandard.ZstdCompressor(write_content_size=True).compress(data))
    assert frame[4] == 0x20 and frame[5] == len(data)  # single segment, 1-byte content size after the FHD
    frame[5] -= 10
    assert zstandard.get_frame_parameters(bytes(frame)).content_size == len(data) - 10
    path = tmp_path / "lies.txt.zst"
    path.write_bytes(bytes(frame))
    assert "cannot read" in refused(path)


def test_appended_garbage_and_a_misnamed_file_are_refused(tmp_path: Path) -> None:
    path = corpus_file(tmp_path, "txt", "zst", ["a", "b"])
    size = path.stat().st_size
    path.write_bytes(path.read_bytes() + b"not zstd")
    assert f"at byte {size}, after 1 complete zstd frame(s)" in refused(path)
    misnamed = tmp_path / "plain.jsonl.zst"
    misnamed.write_bytes(b'{"text": "x"}\n')
    assert "is named .zst but is not zstd data" in refused(misnamed)


# --- bombs: refused while decompressing ---------------------------------------------------------

def bomb(folder: Path, fmt: str, compression: str, size: int, newline_every: int | None = None) -> Path:
    """One document of `size` bytes ('a' repeated: compresses to almost nothing), written in
    pieces so that the test itself never holds it."""
    line = b"a" * (newline_every or CHUNK_BYTES)
    sep = b"\n" if newline_every else b""
    path = folder / f"bomb.{fmt}{'' if compression == 'none' else '.' + compression}"
    with open(path, "wb") as raw:
        out = (gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) if compression == "gz"
               else zstandard.ZstdCompressor().stream_writer(raw, closefd=False) if compression == "zst" else raw)
        out.write(b'{"text": "' if fmt == "jsonl" else b"")
        for _ in range(size // len(line)):
            out.write(line + sep)
        out.write(b'"}\n' if fmt == "jsonl" else b"\n")
        if out is not raw:
            out.close()
    return path


@pytest.mark.parametrize("fmt", ("txt", "jsonl"))
@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_a_bomb_is_refused_before_it_is_held(tmp_path: Path, fmt: str, compression: str) -> None:
    """64x the bound in one line: refused with a Python heap peak of a few bounds, not 64."""
    path = bomb(tmp_path, fmt, compression, 64 * BOUND)
    tracemalloc.start()
    try:
        message = refused(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "line 1 of" in message and "longer than 1 MiB" in message and "data.max_document_bytes" in message
    assert peak < 2 * BOUND + 3 * CHUNK_BYTES, f"peak {peak / 2**20:.1f} MiB while refusing"


@pytest.mark.parametrize("unit", ("paragraph", "file"))
def test_a_paragraph_or_file_over_the_bound_is_refused_line_by_line(tmp_path: Path, unit: str) -> None:
    path = bomb(tmp_path, "txt", "zst", 8 * BOUND, newline_every=1000)  # short lines, no blank one
    tracemalloc.start()
    try:
        message = refused(path, txt_unit=unit)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert f"the {unit} ending at line" in message
    assert peak < 3 * BOUND + 3 * CHUNK_BYTES, f"peak {peak / 2**20:.1f} MiB"


def test_the_bound_is_exact_and_a_setting(tmp_path: Path) -> None:
    bound = 5000
    at, over = "å" * (bound // 2), "å" * (bound // 2) + "x"  # 5000 and 5001 UTF-8 bytes
    assert read(corpus_file(tmp_path, "txt", "gz", [at, "b"]), bound) == [at, "b"]
    assert "line 1 of" in refused(corpus_file(tmp_path, "txt", "gz", [over, "b"]), bound)
    array = tmp_path / "array.json"
    array.write_text(json.dumps([{"text": "x" * (bound // 3)}] * 4, indent=1))  # short lines, one document
    assert "the JSON array" in refused(array, bound) and "jq -c" in refused(array, bound)
    assert DataConfig(sources=[{"name": "a", "path": "x", "lang": "nb"}]).max_document_bytes == 64 << 20
    with pytest.raises(ValueError, match="max_document_bytes"):
        DataConfig(sources=[{"name": "a", "path": "x", "lang": "nb"}], max_document_bytes=MAX_DOCUMENT_BYTES_CEILING + 1)


def test_a_parquet_cell_over_the_bound_is_refused_with_its_row(tmp_path: Path) -> None:
    alone = tmp_path / "alone.parquet"  # one huge cell in a row group of its own: found from the footer
    pq.write_table(pa.table({"text": ["kort", "a" * (8 * BOUND), "kort"]}), alone, row_group_size=1, compression="zstd")
    assert "row 1 of" in (message := refused(alone)) and "row group 1 holds" in message
    among = tmp_path / "among.parquet"  # among many small rows: found in its batch, before Python sees it
    pq.write_table(pa.table({"text": ["kort"] * 5000 + ["a" * (2 * BOUND)] + ["kort"] * 5000}), among)
    assert "row 5000 of" in (message := refused(among)) and "2,097,152 bytes" in message
    whole = tmp_path / "whole.parquet.gz"
    whole.write_bytes(gzip.compress(alone.read_bytes()))
    assert "compressed as a whole" in refused(whole)


# --- the other readers: evaluation data and the data stage's own files -------------------------

def test_evaluation_files_go_through_the_same_reader(tmp_path: Path) -> None:
    pairs = tmp_path / "pairs.jsonl.zst"
    whole = zstandard.ZstdCompressor(write_checksum=True).compress(
        b"".join(b'{"good": "Jeg har en bil %d.", "bad": "Jeg har et bil."}\n' % i for i in range(500)))
    pairs.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(LangadaptError, match=rf"^evaluation data: cannot read {pairs}: it is truncated"):
        read_minimal_pairs(pairs)
    one_document = bomb(tmp_path, "txt", "gz", 80 * (1 << 20))  # over the 64 MiB default bound
    with pytest.raises(LangadaptError, match=rf"^evaluation data: the file of {one_document} .* longer than 64 MiB"):
        read_texts([str(one_document)])


def test_a_data_stage_file_cut_short_is_an_error_not_a_smaller_corpus(tmp_path: Path) -> None:
    path = tmp_path / "nb.jsonl.gz"
    docs = [{"id": str(i), "text": f"tekst {i}", "lang": "nb", "source": "nb", "role": "target"} for i in range(3000)]
    write_documents(path, iter(docs))
    assert list(read_documents(path)) == docs
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(LangadaptError, match=rf"data stage file: cannot read {path}: it is truncated"):
        list(read_documents(path))


def test_lines_carry_their_offsets(tmp_path: Path) -> None:
    path = tmp_path / "x.txt.gz"
    path.write_bytes(gzip.compress("\ufeffab\nc\n\nd".encode()))
    lines = list(iter_lines(path, "k", Bound(10)))
    assert [(n, o, r) for n, o, r in lines] == [(1, 3, b"ab\n"), (2, 6, b"c\n"), (3, 8, b"\n"), (4, 9, b"d")]


@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("bad_line", [1, 2])
def test_a_bad_byte_is_at_the_same_offset_whole_or_line_by_line(tmp_path: Path, compression: str, bad_line: int) -> None:
    """A BOM is dropped on every path and counted in every offset: the whole-file reader, the line
    reader and a corpus source name the same byte for invalid UTF-8, the one an editor shows
    (before, a file read whole as one document counted from after the BOM, three bytes short)."""
    lines = [b"god dag\n", b"ha det bra\n", b"takk for alt\n"]
    lines[bad_line - 1] = lines[bad_line - 1].replace(b"d", b"\xff", 1)
    text = codecs.BOM_UTF8 + b"".join(lines)
    path = tmp_path / f"notes.txt{'' if compression == 'none' else '.' + compression}"
    path.write_bytes(compress(text, compression))
    at = text.index(b"\xff")
    assert at == len(codecs.BOM_UTF8) + sum(map(len, lines[:bad_line - 1])) + lines[bad_line - 1].index(b"\xff")
    with pytest.raises(LangadaptError, match=rf"^k: {path}: invalid UTF-8 at byte {at}$"):
        read_input_text(path, "k", decompress=True)
    if compression == "none":
        with pytest.raises(LangadaptError, match=rf"^k: {path}: invalid UTF-8 at byte {at}$"):
            read_input_text(path, "k")
    line = next(line for line in iter_lines(path, "k", Bound(BOUND)) if line.number == bad_line)
    with pytest.raises(UnicodeDecodeError) as bad:
        line.raw.decode("utf-8")
    assert line.offset + bad.value.start == at
    with pytest.raises(LangadaptError, match=rf"invalid UTF-8 at byte {at} \(line {bad_line}\) of {path}"):
        read(path)
    assert read_input_text(path, "k", errors="replace", decompress=True) == text[3:].decode("utf-8", errors="replace")


# --- through the CLI ----------------------------------------------------------------------------

RECIPE = """\
name: cut
run_root: {root}/runs
init: scratch
base_model:
  architecture: {{model_type: llama, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1,
                 num_attention_heads: 2, num_key_value_heads: 1}}
data:
  force_epochs: true
  sources:
    - {{name: nb, path: {corpus}, lang: nb}}
tokenizer: {{kind: byte_bpe, vocab_size: 300}}
stage1: {{seq_len: 64}}
"""


def test_the_cli_refuses_a_truncated_zst_corpus_with_one_line(tmp_path: Path) -> None:
    """Found by the preflight check (the frame walk reads headers only): before any stage starts."""
    texts = [f"Dokument {i}: dette er en setning om fjell og fjorder, nummer {i}." for i in range(3000)]
    corpus = corpus_file(tmp_path, "jsonl", "zst", texts)
    corpus.write_bytes(corpus.read_bytes()[: corpus.stat().st_size * 2 // 3])
    error = one_error_line(tmp_path, corpus)
    assert f"data.sources[0].path: cannot read {corpus}: it is truncated at byte" in error


def test_the_cli_refuses_a_document_over_the_recipes_bound_with_one_line(tmp_path: Path) -> None:
    texts = [f"Dokument {i}: fjell og fjorder." * (40 if i == 7 else 1) for i in range(3000)]
    corpus = corpus_file(tmp_path, "jsonl", "none", texts)
    error = one_error_line(tmp_path, corpus, "--set", "data.max_document_bytes=1000")
    assert f"source nb: line 8 of {corpus}" in error and "longer than 1,000 bytes" in error


def one_error_line(root: Path, corpus: Path, *args: str) -> str:
    """`langadapt run --until data` on a tiny recipe: exit 2, one error line (returned), nothing complete."""
    recipe = root / "recipe.yaml"
    recipe.write_text(RECIPE.format(root=root, corpus=corpus))
    result = run_cli("run", str(recipe), "--until", "data", *args)
    errors = [line for line in result.stderr.splitlines() if line.startswith("langadapt: error:")]
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert len(errors) == 1, result.stderr
    assert not list((root / "runs").glob("*/*/COMPLETE"))
    return errors[0]
