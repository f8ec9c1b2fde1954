"""Parquet read as the other formats are (issue 32 item 1): page checksums verified where the file
has them, said once where it has none, and a single cell bounded before its page is decompressed.

Before: pyarrow did not verify page CRCs (its default), so a flipped byte inside a data page read
as other text with exit 0; a cell of up to 2 GiB (a page's int32 size) among many small rows was
decompressed whole by Arrow before its length was checked.
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from langadapt.data.sources import iter_texts
from langadapt.errors import LangadaptError
from langadapt.inputs.parquet_pages import column_pages
from langadapt.recipe.data import SourceConfig

BOUND = 1 << 20
TEXTS = [f"dokument nummer {i} om fjorder og fjell" for i in range(3000)]


def _read(path: Path, bound: int = BOUND) -> list[str]:
    source = SourceConfig.model_validate({"name": "nb", "path": str(path), "lang": "nb"})
    return list(iter_texts(source, [path], "error", Counter(), bound))


def _flip(path: Path, needle: bytes) -> None:
    """Change one byte of `needle` (a value stored uncompressed) where it lies in the file."""
    data = bytearray(path.read_bytes())
    at = data.index(needle)
    data[at + 3] ^= 0x20  # 'u' -> 'U': still valid UTF-8, so only a checksum can tell
    path.write_bytes(bytes(data))


def _write(path: Path, texts: list[str], **kw: object) -> Path:
    options = {"compression": "none", "use_dictionary": False, **kw}
    pq.write_table(pa.table({"text": texts}), path, **options)
    return path


def test_a_flipped_byte_in_a_checksummed_page_is_one_located_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "sum.parquet", TEXTS, write_page_checksum=True)
    assert _read(path) == TEXTS
    _flip(path, b"dokument nummer 2001 ")
    with pytest.raises(LangadaptError) as caught:
        _read(path)
    message = str(caught.value)
    assert message.startswith(f"source nb: cannot read {path} as parquet at row ")
    assert "CRC checksum verification failed" in message and "\n" not in message


def test_a_file_without_checksums_is_said_once_and_its_flip_goes_unnoticed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _write(tmp_path / "plain.parquet", TEXTS, row_group_size=500)  # six row groups, one warning
    _flip(path, b"dokument nummer 2001 ")
    with caplog.at_level(logging.WARNING, logger="langadapt.data"):
        texts = _read(path)
    assert texts[2001] == "dokUment nummer 2001 om fjorder og fjell"  # why the warning is needed
    said = [r.getMessage() for r in caplog.records if "checksums" in r.getMessage()]
    assert len(said) == 1 and str(path) in said[0] and "write_page_checksum=True" in said[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="langadapt.data"):
        _read(_write(tmp_path / "sum.parquet", TEXTS, write_page_checksum=True, row_group_size=500))
    assert not [r for r in caplog.records if "checksums" in r.getMessage()]


@pytest.mark.parametrize("version", ["1.0", "2.0"])
@pytest.mark.parametrize("dictionary", [False, True])
def test_page_headers_agree_with_the_footer(tmp_path: Path, version: str, dictionary: bool) -> None:
    path = _write(tmp_path / "p.parquet", TEXTS * 20, data_page_version=version, use_dictionary=dictionary,
                  compression="zstd", data_page_size=64 << 10, row_group_size=25000, write_page_checksum=dictionary)
    meta = pq.ParquetFile(path).metadata
    with path.open("rb") as f:
        for group in range(meta.num_row_groups):
            chunk = meta.row_group(group).column(0)
            start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
            pages = column_pages(f.fileno(), start, chunk.total_compressed_size, "here")
            assert sum(p.rows for p in pages) == meta.row_group(group).num_rows
            assert sum(p.uncompressed for p in pages) < chunk.total_uncompressed_size  # headers are the rest
            assert len(pages) >= 2 and pages[0].dictionary == dictionary
            assert all(p.has_crc == dictionary for p in pages)


def test_a_huge_cell_among_many_rows_is_refused_from_its_page_header(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """5,000 small rows make the row group's footer size plausible (5,000 x the bound); the page
    holding the 8 MiB cell is refused from its header, before Arrow decompresses it."""
    path = _write(tmp_path / "bomb.parquet", ["kort"] * 5000 + ["a" * (8 * BOUND)] + ["kort"] * 5000,
                  compression="zstd")

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("a page was decompressed")

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", never)
    with pytest.raises(LangadaptError) as caught:
        _read(path)
    message = str(caught.value)
    assert message.startswith("source nb: one of rows ") and f"of {path} (a page at byte" in message
    first, last = (int(n) for n in message.split("one of rows ")[1].split(" ")[0].split("-"))
    assert first <= 5000 <= last and "declares 8,4" in message and "data.max_document_bytes" in message
    monkeypatch.undo()
    assert len(_read(path, bound=16 * BOUND)) == 10001  # within a larger bound the same file reads whole


def test_a_corrupt_page_header_is_one_located_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.parquet", TEXTS)
    chunk = pq.ParquetFile(path).metadata.row_group(0).column(0)
    data = bytearray(path.read_bytes())
    data[chunk.data_page_offset:chunk.data_page_offset + 8] = b"\x0f" * 8  # no Thrift type 15
    path.write_bytes(bytes(data))
    with pytest.raises(LangadaptError, match=rf"^source nb: cannot read {path} as parquet: row group 0: .*"
                                             r"\(corrupt or truncated\?\)$"):
        _read(path)
