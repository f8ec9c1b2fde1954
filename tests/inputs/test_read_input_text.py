"""A user's file read whole is read through one bounded function (issue 32 item 2).

`inputs.text.read_input_text` refuses a file over its bound from the file's size, before reading
it: a base model's config.json of 10 GB was read whole into memory (and then parsed). The class is
closed by a scan of the package: every other whole-file read (`read_text`, `read_bytes`,
`json.load`) must be of a file langadapt wrote itself, listed below with where it comes from; a
new reader of a user's file fails here until it goes through `read_input_text`.
"""

from __future__ import annotations

import ast
import json
import tracemalloc
from pathlib import Path

import pytest

import langadapt
from langadapt.errors import LangadaptError
from langadapt.inputs.text import read_input_text
from langadapt.planning.models import load_model_dims

PACKAGE = Path(langadapt.__file__).parent
WHOLE_READS = {"read_text", "read_bytes"}
OWN_FILES = {
    "__init__.py": "the package's own pyproject.toml, for a checkout used without installing",
    "corpora/debian_docs.py": "the .deb this maintainer tool downloaded itself (hashed against its pin)",
    "data/datatrove_pieces.py": "the error note a datatrove task of this run wrote beside its piece",
    "data/shards.py": "the data stage's shard metadata in the run folder",
    "embeddings/mapping.py": "the vocabulary mapping the embeddings stage saved",
    "embeddings/row_plan.py": "the shared-row plan the embeddings stage saved",
    "evaluation/report.py": "the plots the report just drew",
    "evaluation/training_report.py": "the plan.json the pipeline wrote when the run started",
    "evaluation/token_cost.py": "the tokenizer stage's metrics in the run folder",
    "experiments/frontier.py": "the results of the runs it launched",
    "experiments/sweep.py": "the sweep file and job logs it wrote",
    "export/card.py": "the run's own result files",
    "export/folder.py": "the tokenizer_config.json the export just saved",
    "export/stage.py": "the resolved recipe of the run",
    "recipe/errors.py": "the recipe, refused over strict_yaml.MAX_FILE_BYTES from its size before reading",
    "run/completion.py": "the partial-work fingerprint marker the run wrote",
    "run/contenthash.py": "the content-hash cache of the run folder",
    "run/identity.py": "the run folder's owner file",
    "run/layout.py": "run folder pointers, manifests and markers",
    "run/lock.py": "the run lock",
    "run/metrics_log.py": "the training stages' metrics files",
    "run/trackers.py": "the run's tracker ids",
    "tokenizer/saving.py": "the tokenizer_config.json save_pretrained just wrote",
    "train/checkpoint.py": "the trainer state a checkpoint saved",
    "train/monitoring/energy.py": "the kernel's RAPL counters under /sys",
}


def _whole_reads(source: str) -> list[int]:
    """Line numbers of `x.read_text()`, `x.read_bytes()` and `json.load(f)` calls."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attr, owner = node.func.attr, node.func.value
            if attr in WHOLE_READS or (attr == "load" and isinstance(owner, ast.Name) and owner.id == "json"):
                lines.append(node.lineno)
    return lines


def test_every_whole_file_read_is_bounded_or_of_a_file_langadapt_wrote() -> None:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        if lines := _whole_reads(path.read_text(encoding="utf-8")):
            found[name] = lines
    unlisted = {name: lines for name, lines in found.items() if name not in OWN_FILES}
    assert not unlisted, (f"whole-file reads outside inputs.text.read_input_text: {unlisted}; read a user's file "
                          "through read_input_text, or list a file langadapt wrote itself in OWN_FILES")
    assert not set(OWN_FILES) - set(found), f"listed but no longer reading whole: {set(OWN_FILES) - set(found)}"


def test_a_file_over_the_bound_is_refused_from_its_size_without_reading_it(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    with config.open("wb") as f:
        f.truncate(10 << 30)  # sparse: 10 GiB of zeros that take no disk
    tracemalloc.start()
    try:
        with pytest.raises(LangadaptError) as caught:
            load_model_dims(tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(caught.value) == (f"model config: {config} is 10,737,418,240 bytes, more than the 67,108,864 such "
                                 "a file may have (read whole): is it the right file?")
    assert peak < 1 << 20


def test_the_bound_is_exact_and_the_text_is_decoded(tmp_path: Path) -> None:
    path = tmp_path / "note.txt"
    path.write_bytes(b"\xef\xbb\xbfsafe \xff\n")
    assert read_input_text(path, "note", errors="replace") == "safe \ufffd\n"
    with pytest.raises(LangadaptError, match=rf"^note: {path}: invalid UTF-8 at byte 8$"):
        read_input_text(path, "note")
    assert read_input_text(path, "note", max_bytes=10, errors="replace").startswith("safe")  # 10 bytes: at the bound
    with pytest.raises(LangadaptError, match=r"^note: .* is 10 bytes, more than the 9 "):
        read_input_text(path, "note", max_bytes=9)
    with pytest.raises(LangadaptError, match=rf"^note: {tmp_path} is not a regular file \(a directory\)$"):
        read_input_text(tmp_path, "note")


def test_every_way_a_json_file_fails_is_one_line(tmp_path: Path) -> None:
    """read_input_json (config.json, safetensors index, tekken.json): malformed with its line and
    column, nested past the recursion limit (a RecursionError from json), and a valid one read."""
    from langadapt.inputs.text import read_input_json

    config = tmp_path / "config.json"
    config.write_text('{\n  "hidden_size": 32,\n  "layers": oops\n}\n', encoding="utf-8")
    with pytest.raises(LangadaptError, match=r"^model config: .*config\.json is not valid JSON: Expecting value "
                                             r"\(line 3, column 13\)$"):
        read_input_json(config, "model config")
    config.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(LangadaptError, match=r"is not valid JSON: nested deeper than [\d,]+ levels$"):
        read_input_json(config, "model config")
    config.write_text('{"hidden_size": 32}', encoding="utf-8")
    assert read_input_json(config, "model config") == {"hidden_size": 32}


@pytest.mark.parametrize("text", [
    '{"id": 123456789012345678901234567890, "text": "x"}',  # past 64 bits: orjson would give a float
    '{"id": -9223372036854775809}', '{"id": 18446744073709551615}', '12345678901234567890123',
    '{"x": [1, 2.5, {"y": 2e19}]}', '{"x": 9.3e18}', '{"a": 1e400}',
    '[NaN, Infinity, -Infinity]', '"\\ud800x"',  # json accepts what orjson refuses
    '{"a": -0.0, "b": 0.1, "c": 1e-320}', '{"a": 1, "a": 2}', '{"t": "tab\\there", "u": "\\u00e6\\u00f8"}',
    "[" * 500 + "]" * 500,  # orjson nests it; looking for a big float in it does not recurse
], ids=lambda text: text[:40])
def test_user_json_parses_to_what_json_gives(text: str) -> None:
    """`parse_json` tries orjson first (half the CPU on corpus lines) yet returns json's objects,
    integers of any size exact."""
    from langadapt.inputs.files import parse_json

    got, want = parse_json(text, "test"), json.loads(text)
    assert repr(got) == repr(want)
    assert type(got) is type(want)
