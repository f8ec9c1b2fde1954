"""Reading sources: every format, compression, and one-line errors that name source and place."""

from __future__ import annotations

import gzip
import json
import sys
import types
from collections import Counter
from pathlib import Path

import pytest

from langadapt.data.source_paths import resolve_paths
from langadapt.data.sources import iter_texts
from langadapt.errors import LangadaptError
from langadapt.recipe.data import SourceConfig


def _source(path: Path | str, **kw: object) -> SourceConfig:
    return SourceConfig.model_validate({"name": "nb", "path": str(path), "lang": "nb", **kw})


def _read(path: Path | str, policy: str = "error", **kw: object) -> list[str]:
    source = _source(path, **kw)
    return list(iter_texts(source, resolve_paths(source, source.path), policy, Counter()))  # type: ignore[arg-type]


def test_txt_units(tmp_path: Path) -> None:
    path = tmp_path / "a.txt"
    path.write_text("first line\nsame para\n\n\nsecond para\n")
    assert _read(path) == ["first line\nsame para\n", "second para\n"]
    assert _read(path, txt_unit="line") == ["first line", "same para", "second para"]
    assert _read(path, txt_unit="file") == ["first line\nsame para\n\n\nsecond para\n"]


def test_jsonl_json_array_gzip_zstd_parquet_and_globs(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard

    rows = [{"body": "én"}, {"body": "to"}]
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    (tmp_path / "a.jsonl").write_text(lines)
    (tmp_path / "b.json").write_text(json.dumps(rows))
    with gzip.open(tmp_path / "c.jsonl.gz", "wt") as f:
        f.write(lines)
    (tmp_path / "d.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(lines.encode()))
    pq.write_table(pa.table({"body": ["tre", None]}), tmp_path / "e.parquet")
    assert _read(tmp_path / "*", text_field="body") == ["én", "to"] * 4 + ["tre", ""]
    assert _read(tmp_path / "*.jsonl*", text_field="body", max_docs=3) == ["én", "to", "én"]


def test_hf_disk_dataset(tmp_path: Path) -> None:
    import datasets

    datasets.Dataset.from_dict({"text": ["hei", "hallo"]}).save_to_disk(str(tmp_path / "ds"))
    assert _read(tmp_path / "ds") == ["hei", "hallo"]
    with pytest.raises(LangadaptError, match=r"source nb: field 'body' not found at row 0 .*keys: text"):
        _read(tmp_path / "ds", text_field="body")


def test_hf_hub_streaming_reads_a_local_dataset_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a hub id would need the network; a folder does not
    (tmp_path / "train.jsonl").write_text('{"text": "hei"}\n{"text": "hallo"}\n')
    assert _read(tmp_path, format="hf_hub") == ["hei", "hallo"]


def test_path_matching_nothing(tmp_path: Path) -> None:
    with pytest.raises(LangadaptError, match=r"^source nb: path '.*nothing\*\.txt' matches no file"):
        _read(tmp_path / "nothing*.txt")


def test_missing_path_is_fetched_lazily_when_configured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def build_debian_corpus(package: str, locale: str, out_path: Path) -> Path:
        calls.append((package, locale))
        with gzip.open(out_path, "wt") as f:
            f.write(json.dumps({"text": "fra pakken"}) + "\n")
        return out_path

    fake = types.ModuleType("langadapt.corpora.debian_docs")
    fake.build_debian_corpus = build_debian_corpus  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "langadapt.corpora.debian_docs", fake)
    target = tmp_path / "nb.jsonl.gz"
    fetch = {"debian_package": "debian-handbook", "locale": "nb-NO"}
    assert _read(target, fetch=fetch) == ["fra pakken"]
    assert calls == [("debian-handbook", "nb-NO")]


def test_binary_and_unreadable_files(tmp_path: Path) -> None:
    binary = tmp_path / "model.txt"
    binary.write_bytes(b"PK\x03\x04" + bytes(range(256)))
    with pytest.raises(LangadaptError, match=r"^source nb: .*model\.txt looks binary \(NUL byte at offset 4\)"):
        _read(binary)
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(gzip.compress(b'{"text": "a"}\n' * 100)[:40])
    with pytest.raises(LangadaptError, match=r"^source nb: cannot read .*broken\.jsonl\.gz"):
        _read(broken)
    unknown = tmp_path / "data.xml"
    unknown.write_text("<a/>")
    with pytest.raises(LangadaptError, match=r"cannot tell the format of .*data\.xml: set its format"):
        _read(unknown)


def test_non_utf8_reported_with_file_and_byte_offset_and_handled_per_policy(tmp_path: Path) -> None:
    path = tmp_path / "latin1.txt"
    path.write_bytes(b"god dag\n\n" + "blåbær\n\nsiste\n".encode("latin-1"))
    with pytest.raises(LangadaptError) as err:
        _read(path)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("source nb: invalid UTF-8 at byte 11 (line 3) of ")
    assert "latin1.txt" in message and "on_decode_error" in message
    assert _read(path, "replace") == ["god dag\n", "bl\ufffdb\ufffdr\n", "siste\n"]
    assert _read(path, "skip") == ["god dag\n", "siste\n"]
    jsonl = tmp_path / "bad.jsonl"
    jsonl.write_bytes(b'{"text": "ok"}\n{"text": "\xff"}\n{"text": "also ok"}\n')
    with pytest.raises(LangadaptError, match=r"invalid UTF-8 at byte 25 \(line 2\) of .*bad\.jsonl"):
        _read(jsonl)
    assert _read(jsonl, "skip") == ["ok", "also ok"]


def test_missing_field_bad_json_and_wrong_type(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text('{"content": "x", "url": "u"}\n')
    with pytest.raises(LangadaptError, match=r"^source nb: field 'text' not found at line 1 of .*\(keys: content, url\)"):
        _read(path)
    path.write_text('{"text": "x"}\n{"text": oops}\n')
    with pytest.raises(LangadaptError, match=r"source nb: invalid JSON at line 2 of"):
        _read(path)
    path.write_text('{"text": "x"}\n{"text": ' + "[" * 50_000 + "]" * 50_000 + "}\n")  # json's RecursionError
    with pytest.raises(LangadaptError, match=r"source nb: invalid JSON at line 2 of .*: nested deeper than"):
        _read(path)
    path.write_text('{"text": 3}\n')
    with pytest.raises(LangadaptError, match=r"field 'text' at line 1 of .* is int, not text"):
        _read(path)
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "p.parquet")
    with pytest.raises(LangadaptError, match=r"field 'text' not found in .*p\.parquet \(columns: body\)"):
        _read(tmp_path / "p.parquet")


def test_a_symbolic_link_that_leads_nowhere_is_said_as_such(tmp_path: Path) -> None:
    """A link loop (or a link whose target is gone) looks missing to exists() while `ls` lists it:
    the error names the link and where it points, not "matches no file"."""
    from langadapt.data.source_paths import resolve_paths
    from langadapt.recipe.data import SourceConfig

    (tmp_path / "a.jsonl").symlink_to("b.jsonl")
    (tmp_path / "b.jsonl").symlink_to("a.jsonl")
    source = SourceConfig(name="nb", path=str(tmp_path / "a.jsonl"), lang="nb")
    with pytest.raises(LangadaptError, match=r"a\.jsonl' is a symbolic link that leads to no file \(-> b\.jsonl: a loop"):
        resolve_paths(source, source.path)
    with pytest.raises(LangadaptError, match=r"nothere\.jsonl' matches no file"):
        resolve_paths(source, str(tmp_path / "nothere.jsonl"))
