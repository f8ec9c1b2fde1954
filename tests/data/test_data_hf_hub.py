"""Hub sources (`format: hf_hub`) read offline: a local folder laid out as a Hub dataset repo, with
named configs in its README's YAML (`configs:`), which `datasets.load_dataset(folder, name=...)`
resolves exactly as it resolves a Hub id. No network: datasets>=4 no longer runs loading scripts,
and a folder of jsonl/parquet files plus a README is what a Hub dataset is today.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import zstandard
from helpers import multiproc as mp
from pydantic import ValidationError

from langadapt.data.documents import read_documents
from langadapt.data.sources import iter_texts
from langadapt.data.stage import run as run_data
from langadapt.errors import LangadaptError
from langadapt.pipeline import runner as pipeline
from langadapt.recipe import load_recipe
from langadapt.recipe.data import DataConfig, DataSlice, SourceConfig
from langadapt.run.context import StageContext

REPO = Path(__file__).resolve().parents[2]
README = """\
---
configs:
- config_name: "no"
  data_files:
  - split: train
    path: "no/train-*.jsonl"
  - split: validation
    path: "no/valid.jsonl"
- config_name: nn
  data_files:
  - split: train
    path: "nn/*.jsonl"
---
# A CulturaX-shaped dataset: one config per language.
"""


def _text(lang: str, i: int) -> str:
    return f"{lang} dokument nummer {i}: " + " ".join(["ord"] * (10 + i % 7))


def _jsonl(path: Path, texts: list[str]) -> None:
    path.write_text("".join(json.dumps({"text": t, "url": f"https://no.example/{i}"}) + "\n" for i, t in enumerate(texts)))


@pytest.fixture
def hub_folder(tmp_path: Path) -> Path:
    """A dataset repo with configs `no` (two shards and a validation split) and `nn`."""
    root = tmp_path / "culturax"
    (root / "nn").mkdir(parents=True)
    (root / "no").mkdir()
    for shard in range(2):
        _jsonl(root / "no" / f"train-{shard:05d}.jsonl", [_text("no", shard * 100 + i) for i in range(30)])
    _jsonl(root / "no" / "valid.jsonl", [_text("no-valid", i) for i in range(5)])
    _jsonl(root / "nn" / "train-00000.jsonl", [_text("nn", i) for i in range(30)])
    (root / "README.md").write_text(README)
    return root


def _source(folder: Path, **keys: object) -> SourceConfig:
    return SourceConfig.model_validate({"name": "culturax_no", "path": str(folder), "format": "hf_hub",
                                        "lang": "nb", **keys})


def _read(source: SourceConfig) -> list[str]:
    return list(iter_texts(source, [Path(str(source.path))], "error", Counter()))


def test_a_named_subset_streams_only_that_config(hub_folder: Path) -> None:
    texts = _read(_source(hub_folder, subset="no"))
    assert len(texts) == 60 and all(t.startswith("no dokument") for t in texts)
    assert _read(_source(hub_folder, subset="nn")) == [_text("nn", i) for i in range(30)]
    assert _read(_source(hub_folder, subset="no", split="validation")) == [_text("no-valid", i) for i in range(5)]


def test_streaming_off_downloads_first_and_reads_the_same_rows(hub_folder: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("datasets.config.HF_DATASETS_CACHE", str(tmp_path / "cache"))
    assert _read(_source(hub_folder, subset="nn", streaming=False)) == _read(_source(hub_folder, subset="nn"))
    assert (tmp_path / "cache").is_dir()  # materialised as Arrow files, unlike the stream


def test_data_files_and_the_document_cap_bound_what_is_read(hub_folder: Path) -> None:
    one_shard = _read(_source(hub_folder, subset="no", data_files="no/train-00001.jsonl"))
    assert one_shard == [_text("no", 100 + i) for i in range(30)]
    assert _read(_source(hub_folder, subset="no", max_docs=7)) == [_text("no", i) for i in range(7)]


def test_the_data_stage_writes_the_subsets_documents(tmp_path: Path, hub_folder: Path) -> None:
    config = DataConfig.model_validate({"sources": [
        {"name": "culturax_no", "path": str(hub_folder), "format": "hf_hub", "subset": "no", "lang": "nb"},
        {"name": "culturax_nn", "path": str(hub_folder), "format": "hf_hub", "subset": "nn", "lang": "nn",
         "max_docs": 10}], "valid_fraction": 0.1})
    ctx = StageContext(run_dir=tmp_path / "run", stage="data", seed=0)
    ctx.out.mkdir(parents=True)
    summary = run_data(DataSlice(config), ctx)
    assert summary["sources"]["culturax_no"]["docs_read"] == 60
    assert summary["sources"]["culturax_nn"]["docs_read"] == 10
    written = [d["text"] for split in ("train", "valid") for d in read_documents(ctx.out / split / "culturax_nn.jsonl.gz")]
    assert sorted(written) == sorted(_text("nn", i) for i in range(10))


@pytest.mark.parametrize(("keys", "fragments"), [
    ({"subset": "se"}, ["source culturax_no: subset 'se' is not a config of", "available: no, nn"]),
    ({}, ["source culturax_no: set subset", "available: no, nn"]),
    ({"subset": "no", "split": "test"}, ["source culturax_no: split 'test' is not in"]),
    ({"subset": "no", "text_field": "content"}, ["source culturax_no: text_field 'content' is not a column",
                                                  "columns: text, url"]),
])
def test_bad_hub_keys_are_one_line_naming_source_and_key(hub_folder: Path, keys: dict, fragments: list[str]) -> None:
    with pytest.raises(LangadaptError) as caught:
        _read(_source(hub_folder, **keys))
    message = str(caught.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message


def test_hub_keys_on_a_file_source_are_refused() -> None:
    with pytest.raises(ValidationError, match="source nb: subset applies only to format: hf_hub"):
        SourceConfig.model_validate({"name": "nb", "path": "nb.jsonl", "lang": "nb", "subset": "no"})


FINGERPRINT_RECIPE = """\
name: hub
run_root: {root}/runs
init: scratch
base_model:
  architecture: {{model_type: llama, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1,
                 num_attention_heads: 2, num_key_value_heads: 1}}
data:
  sources:
    - {{name: culturax_no, path: {path}, format: hf_hub, subset: "no", lang: nb{extra}}}
tokenizer: {{kind: byte_bpe, vocab_size: 300}}
"""


def _data_print(tmp_path: Path, path: object, extra: str = "") -> str:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(FINGERPRINT_RECIPE.format(root=tmp_path, path=path, extra=extra))
    loaded = load_recipe(recipe)
    return pipeline.fingerprints(loaded, pipeline.stage_table(loaded.recipe))["data"]


def test_the_fingerprint_follows_revision_subset_and_a_local_folders_content(tmp_path: Path, hub_folder: Path) -> None:
    hub_id = _data_print(tmp_path, "uonlp/CulturaX")
    assert _data_print(tmp_path, "uonlp/CulturaX") == hub_id  # stable
    assert _data_print(tmp_path, "uonlp/CulturaX", ", revision: " + "a" * 40) != hub_id
    assert _data_print(tmp_path, "uonlp/CulturaX", ", data_files: no/*.parquet") != hub_id
    local = _data_print(tmp_path, hub_folder)
    _jsonl(hub_folder / "no" / "train-00001.jsonl", ["endret"])
    assert _data_print(tmp_path, hub_folder) != local  # a local dataset is hashed by content


def test_pinned_means_a_commit_or_a_local_folder(hub_folder: Path) -> None:
    assert not SourceConfig(name="a", path="uonlp/CulturaX", format="hf_hub", lang="nb").pinned
    assert not SourceConfig(name="a", path="uonlp/CulturaX", format="hf_hub", lang="nb", revision="main").pinned
    assert SourceConfig(name="a", path="uonlp/CulturaX", format="hf_hub", lang="nb", revision="0" * 40).pinned
    assert _source(hub_folder).pinned


def test_dry_run_of_the_7b_recipe_lists_its_hub_sources(tmp_path: Path) -> None:
    hplt = tmp_path / "nb_1.jsonl.zst"  # a real (tiny) file: an empty one is refused as empty
    hplt.write_bytes(zstandard.ZstdCompressor().compress(b'{"text": "Dette er en setning."}\n' * 50))
    # mp.env(): without the WORLD_SIZE=1 etc. an in-process DeepSpeed test may have exported, which
    # would size the budget for one process instead of the recipe's 64 ranks (CI, test order).
    result = subprocess.run([sys.executable, "-m", "langadapt.cli", "run", "recipes/norwegian_warm.yaml", "--dry-run",
                             "--set", f"data.sources[0].path={hplt}"],
                            check=False, cwd=REPO, capture_output=True, text=True, timeout=300, env=mp.env())
    # Where the Hub does not answer (CI, a compute node), the dry run says so for each Hub source and
    # the base, and for nothing else; the listing is printed either way.
    unreachable = ("the Hub cannot be reached", "HF_HUB_OFFLINE=1 keeps the Hub out of reach")
    problems = [line for line in result.stderr.splitlines() if line.startswith("langadapt: error:")]
    assert all(any(why in line for why in unreachable) for line in problems), result.stderr
    assert result.returncode == (2 if problems else 0), result.stderr
    listed = result.stdout.split("sources:\n", 1)[1].splitlines()
    assert [line.split()[0] for line in listed] == ["hplt_no", "culturax_no", "culturax_nn", "ncc", "code"]
    assert "hub uonlp/CulturaX subset no split train revision latest (not pinned to a commit)" in listed[1]
    assert "hub uonlp/CulturaX subset nn " in listed[2]
    assert "hub vikp/starcoder_filtered subset - split train revision 059c72ec78adb5710be6aabd310cfb05516e086e" in listed[4]
    assert "not pinned" not in listed[4]
