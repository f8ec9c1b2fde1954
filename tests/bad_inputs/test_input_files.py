"""Bad input files and run identity (issue 23), through the real CLI: one `langadapt: error:` line
naming the file and recipe key, a non-zero exit, nothing marked COMPLETE, and for what the
preflight check finds, a refusal before torch is imported (no stage starts).

Before: a FIFO as corpus hung (ignoring SIGTERM), a corrupt .zst was a ZstdError traceback, a
truncated model.safetensors passed --dry-run and crashed after two stages, an empty corpus was
blamed on vocab_size, a BOM broke line 1 of a JSONL file, a second recipe with the same name
wrote into the first one's run folder, and a suite with no data marked evaluate complete.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import zstandard
from helpers.cli import run_cli_probing_torch
from safetensors.numpy import save as safetensors_bytes

from langadapt.errors import LangadaptError
from langadapt.evaluation.preparation import plan_suites
from langadapt.evaluation.suite import load_suite
from langadapt.recipe.evaluation import EvaluationConfig

REPO = Path(__file__).resolve().parents[2]
SCRATCH = """\
name: bad
run_root: {root}/runs
init: scratch
base_model:
  architecture: {{model_type: llama, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1,
                 num_attention_heads: 2, num_key_value_heads: 1}}
data:
  force_epochs: true  # the tiny corpora here are repeated many times: not the problem under test
  sources:
    - {{name: nb, path: {corpus}, lang: nb}}
tokenizer:
  kind: byte_bpe
  vocab_size: 300
stage1:
  seq_len: 64
"""

WARM = """\
name: warm
run_root: {root}/runs
base_model:
  path: {root}/base
data:
  force_epochs: true
  sources:
    - {{name: nb, path: {corpus}, lang: nb}}
tokenizer:
  vocab_size: 300
stage1:
  seq_len: 64
"""

TEXTS = [f"Dokument {i}: dette er en setning om fjell og fjorder, nummer {i}." for i in range(200)]


def langadapt(*args: str) -> tuple[subprocess.CompletedProcess, bool]:
    """The CLI as a user runs it, and whether it imported torch; a hang (the FIFO) fails at the timeout."""
    return run_cli_probing_torch(*args)


def jsonl(texts: list[str]) -> bytes:
    return "".join(json.dumps({"text": t}) + "\n" for t in texts).encode()


def recipe(tmp_path: Path, corpus: Path | str, template: str = SCRATCH, file: str = "recipe.yaml",
           extra: str = "") -> Path:
    path = tmp_path / file
    path.write_text(template.format(root=tmp_path, corpus=corpus) + extra)
    return path


def assert_refused(run: tuple[subprocess.CompletedProcess, bool], root: Path, *fragments: str,
                   preflight: bool = True) -> str:
    """Exit non-zero, one error line holding every fragment, no traceback, no stage COMPLETE."""
    result, imported_torch = run
    assert result.returncode != 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("langadapt: error:")]
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert not list((root / "runs").glob("*/*/COMPLETE")), "a stage was marked complete"
    if preflight:
        assert not imported_torch, "refused after torch was imported: found after work started?"
    return lines[0]


def assert_ran(run: tuple[subprocess.CompletedProcess, bool]) -> None:
    result, _ = run
    assert result.returncode == 0, result.stderr


# --- 1. files that are not what they claim ------------------------------------------------------

@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_a_corpus_that_is_not_a_regular_file_is_refused_not_waited_on(tmp_path: Path, kind: str) -> None:
    corpus = {"fifo": tmp_path / "nb.jsonl", "directory": tmp_path / "nb.jsonl", "device": Path("/dev/zero")}[kind]
    if kind == "fifo":
        os.mkfifo(corpus)
    elif kind == "directory":
        corpus.mkdir()
    what = {"fifo": "(a FIFO)", "directory": "(a directory)", "device": "(a character device)"}[kind]
    path = recipe(tmp_path, corpus)
    for args in (["--dry-run"], []):  # the real run must not hang either
        assert_refused(langadapt("run", str(path), *args), tmp_path, "data.sources[0].path",
                       f"{corpus} is not a regular file {what}")


def test_a_corrupt_zst_header_is_found_by_the_dry_run(tmp_path: Path) -> None:
    good = zstandard.ZstdCompressor().compress(jsonl(TEXTS))
    corpus = tmp_path / "nb.jsonl.zst"
    corpus.write_bytes(good[:4] + b"\xff" * 64 + good[68:])
    assert_refused(langadapt("run", str(recipe(tmp_path, corpus)), "--dry-run"), tmp_path,
                   "data.sources[0].path", f"{corpus} is not valid zstd data")
    named = tmp_path / "plain.jsonl.gz"
    named.write_bytes(jsonl(TEXTS))
    assert_refused(langadapt("run", str(recipe(tmp_path, named)), "--dry-run"), tmp_path,
                   "data.sources[0].path", f"{named} is named .gz but is not gzip data")


@pytest.mark.parametrize("suffix", [".zst", ".gz"])
def test_corruption_mid_stream_is_one_line_with_the_file_and_offset(tmp_path: Path, suffix: str) -> None:
    """Past the header probe: found while the data stage streams the file, which is then not complete."""
    head = jsonl(TEXTS * 20)  # > 64 KiB of text: the preflight probe reads a sound first block
    corpus = tmp_path / f"nb.jsonl{suffix}"
    if suffix == ".zst":
        second = zstandard.ZstdCompressor().compress(jsonl(TEXTS))
        corpus.write_bytes(zstandard.ZstdCompressor().compress(head) + second[:6] + b"\x00\xff" * 40 + second[86:])
    else:
        whole = gzip.compress(head + jsonl(TEXTS) * 50, mtime=0)
        corpus.write_bytes(whole[: len(whole) * 3 // 4])  # cut short: a truncated download
    line = assert_refused(langadapt("run", str(recipe(tmp_path, corpus)), "--until", "data"), tmp_path,
                          "cannot read", str(corpus), "at byte", preflight=False)  # .zst: preflight's frame walk
    assert "Error" not in line.split(str(corpus))[0]


def test_truncated_base_weights_are_found_by_the_dry_run(tmp_path: Path) -> None:
    corpus = tmp_path / "nb.jsonl"
    corpus.write_bytes(jsonl(TEXTS))
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text(json.dumps({"model_type": "llama", "max_position_embeddings": 128}))
    (base / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": {"</s>": 0}, "merges": []}}))
    (base / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    weights = safetensors_bytes({"embed": np.zeros((64, 32), np.float32), "head": np.ones((64, 32), np.float32)})
    (base / "model.safetensors").write_bytes(weights[: len(weights) - 1000])
    path = recipe(tmp_path, corpus, WARM)
    assert_refused(langadapt("run", str(path), "--dry-run"), tmp_path, "base_model.path",
                   f"{base / 'model.safetensors'} is truncated or corrupt")
    (base / "model.safetensors").unlink()
    (base / "model-00001-of-00002.safetensors").write_bytes(weights)
    index = {"weight_map": {"embed": "model-00001-of-00002.safetensors", "head": "model-00002-of-00002.safetensors"}}
    (base / "model.safetensors.index.json").write_text(json.dumps(index))
    assert_refused(langadapt("run", str(path), "--dry-run"), tmp_path, "base_model.path",
                   "names shard model-00002-of-00002.safetensors, which is missing")



def _base_with_parts(base: Path, config_vocab: int, rows: int, tokenizer_ids: int, sharded: bool = False,
                     embedding: str = "model.embed_tokens.weight", head: np.ndarray | None = None,
                     **config_keys: object) -> None:
    """A base folder whose config.json, embedding rows, tokenizer.json ids and output head (default: a
    head of ones beside an embedding of zeros) are chosen apart."""
    base.mkdir(exist_ok=True)
    (base / "config.json").write_text(json.dumps({
        "model_type": "llama", "max_position_embeddings": 128, "vocab_size": config_vocab, "hidden_size": 8,
        "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
        **config_keys}))
    vocab = {f"t{i}": i for i in range(tokenizer_ids - 2)}
    added = [{"id": tokenizer_ids - 2 + i, "content": tok, "special": True, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False} for i, tok in enumerate(("<s>", "</s>"))]  # loadable as written
    (base / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": vocab, "merges": []},
                                                     "added_tokens": added}))
    (base / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    tensors = {embedding: np.zeros((rows, 8), np.float32), "lm_head.weight": np.ones((rows, 8), np.float32)}
    if head is not None:
        tensors["lm_head.weight"] = head
        if not head.size:
            del tensors["lm_head.weight"]
    weights = safetensors_bytes(tensors)
    if sharded:
        (base / "model-00001-of-00001.safetensors").write_bytes(weights)
        index = {"weight_map": {name: "model-00001-of-00001.safetensors" for name in tensors}}
        (base / "model.safetensors.index.json").write_text(json.dumps(index))
    else:
        (base / "model.safetensors").write_bytes(weights)


@pytest.mark.parametrize("sharded", [False, True], ids=["single", "sharded"])
def test_a_config_vocab_size_other_than_the_embedding_rows_is_found_by_the_dry_run(tmp_path: Path, sharded: bool) -> None:
    """Before: passed preflight, then a transformers size-mismatch traceback when stage 1 loaded the base."""
    corpus = tmp_path / "nb.jsonl"
    corpus.write_bytes(jsonl(TEXTS))
    _base_with_parts(tmp_path / "base", config_vocab=80, rows=64, tokenizer_ids=60, sharded=sharded)
    line = assert_refused(langadapt("run", str(recipe(tmp_path, corpus, WARM)), "--dry-run"), tmp_path,
                          "recipe.yaml:4: base_model.path: ", "config.json has vocab_size 80 but the weights' "
                          "model.embed_tokens.weight has 64 rows", "set vocab_size to 64")
    assert "Traceback" not in line


def test_a_base_whose_parts_agree_passes_the_dry_run(tmp_path: Path) -> None:
    """The same base with config, rows and tokenizer in agreement (rows past the tokenizer are padding)."""
    corpus = tmp_path / "nb.jsonl"
    corpus.write_bytes(jsonl(TEXTS))
    _base_with_parts(tmp_path / "base", config_vocab=64, rows=64, tokenizer_ids=60)
    result, _ = langadapt("run", str(recipe(tmp_path, corpus, WARM)), "--dry-run")
    assert result.returncode == 0, result.stderr


def test_a_tokenizer_with_ids_past_the_embedding_rows_is_found_by_the_dry_run(tmp_path: Path) -> None:
    corpus = tmp_path / "nb.jsonl"
    corpus.write_bytes(jsonl(TEXTS))
    _base_with_parts(tmp_path / "base", config_vocab=64, rows=64, tokenizer_ids=70)
    assert_refused(langadapt("run", str(recipe(tmp_path, corpus, WARM)), "--dry-run"), tmp_path,
                   "recipe.yaml:4: base_model.path: ", "tokenizer.json has token ids up to 69 but the weights' "
                   "model.embed_tokens.weight has only 64 rows")


@pytest.mark.parametrize(("config_vocab", "rows", "tokenizer_ids", "embedding", "problem"), [
    (64, 64, 60, "model.embed_tokens.weight", None),  # rows past the tokenizer: padding, normal
    (64, 64, 64, "gpt_neox.embed_in.weight", None),
    (80, 64, 60, "transformer.wte.weight", "config.json has vocab_size 80"),
    (64, 64, 65, "gpt_neox.embed_in.weight", "tokenizer.json has token ids up to 64"),
    (80, 64, 90, "some.unknown.embedding", None),  # no known name: not checked, no error
])
def test_parts_problem_reads_headers_only(tmp_path: Path, config_vocab: int, rows: int, tokenizer_ids: int,
                                          embedding: str, problem: str | None) -> None:
    from langadapt.inputs.model_folder import parts_problem

    _base_with_parts(tmp_path, config_vocab, rows, tokenizer_ids, embedding=embedding)
    found = parts_problem(tmp_path)
    assert found is None if problem is None else problem in (found or ""), found


NO_HEAD = np.zeros((0, 8), np.float32)


@pytest.mark.parametrize("sharded", [False, True], ids=["single", "sharded"])
@pytest.mark.parametrize(("config_keys", "head", "problem"), [
    ({"tie_word_embeddings": True}, None, "tie_word_embeddings: true but the weights hold a separate lm_head.weight "
                                          "that differs from model.embed_tokens.weight"),
    ({"tie_word_embeddings": True}, np.zeros((64, 8), np.float32), None),  # stored, but the embedding itself
    ({"tie_word_embeddings": True}, NO_HEAD, None),  # tied and saved once: how transformers saves it
    ({"tie_word_embeddings": False}, NO_HEAD, "tie_word_embeddings: false but the weights hold no output head"),
    ({}, NO_HEAD, None),  # no explicit setting: the model type's default is the loader's to apply
    ({"bos_token_id": 64}, None, "has bos_token_id 64, outside the weights' 64 embedding rows"),
    ({"eos_token_id": [2, 99]}, None, "has eos_token_id 99, outside"),
    ({"pad_token_id": -1}, None, "has pad_token_id -1, outside"),
    ({"bos_token_id": 1, "eos_token_id": [2, 63], "pad_token_id": None}, None, None),
])
def test_a_tied_flag_or_special_id_the_weights_contradict(tmp_path: Path, config_keys: dict, head: np.ndarray | None,
                                                           problem: str | None, sharded: bool) -> None:
    """A tie flag the tensors contradict silently swaps or randomises the output head when
    transformers loads the base; a special id past the rows indexes nothing. Headers (and 16 rows
    of a stored head) only."""
    from langadapt.inputs.model_folder import parts_problem

    _base_with_parts(tmp_path, 64, 64, 60, sharded=sharded, head=head, **config_keys)
    found = parts_problem(tmp_path)
    assert found is None if problem is None else problem in (found or ""), found

# --- 2. empty files, NUL characters, a byte order mark -----------------------------------------

def test_an_empty_corpus_is_blamed_on_the_file_not_vocab_size(tmp_path: Path) -> None:
    for name, content in (("nb.jsonl", b""), ("nb.jsonl.gz", gzip.compress(b"")),
                          ("nb.jsonl.zst", zstandard.ZstdCompressor().compress(b""))):
        corpus = tmp_path / name
        corpus.write_bytes(content)
        line = assert_refused(langadapt("run", str(recipe(tmp_path, corpus)), "--dry-run"), tmp_path,
                              "data.sources[0].path", f"{corpus} is empty")
        assert line.index("is empty") < line.find("vocab_size") or "vocab_size" not in line


def test_nul_characters_are_stripped_and_a_bom_is_dropped(tmp_path: Path) -> None:
    """Both are accepted: the data stage completes, with the NULs counted in its summary."""
    corpus = tmp_path / "nb.jsonl"
    texts = [t + ("\x00" if i % 10 == 0 else "") for i, t in enumerate(TEXTS)]
    corpus.write_bytes(b"\xef\xbb\xbf" + jsonl(texts))
    assert_ran(langadapt("run", str(recipe(tmp_path, corpus)), "--until", "data"))
    manifest = json.loads((tmp_path / "runs" / "bad" / "data" / "manifest.json").read_text())
    assert manifest["summary"]["sources"]["nb"]["dropped"]["nul_stripped"] == 20
    train = tmp_path / "runs" / "bad" / "data" / "train"
    assert not any(b"\\u0000" in gzip.decompress(f.read_bytes()) for f in train.glob("*.jsonl.gz"))


# --- 3. two writers, one name ------------------------------------------------------------------

def test_a_second_recipe_with_the_same_name_is_refused_unless_forced(tmp_path: Path) -> None:
    corpus = tmp_path / "nb.jsonl"
    corpus.write_bytes(jsonl(TEXTS))
    first = recipe(tmp_path, corpus)
    assert_ran(langadapt("run", str(first), "--until", "data"))
    assert_ran(langadapt("run", str(first), "--until", "data", "--set", "data.valid_fraction=0.1"))
    second = recipe(tmp_path, corpus, file="copy.yaml", extra="seed: 7\n")
    for args in (["--dry-run"], ["--until", "data"]):
        result, imported_torch = langadapt("run", str(second), *args)
        assert result.returncode != 0 and "Traceback" not in result.stderr
        lines = [line for line in result.stderr.splitlines() if line.startswith("langadapt: error:")]
        assert len(lines) == 1 and str(first) in lines[0] and str(second) in lines[0], result.stderr
        assert "--force" in lines[0] and not imported_torch
    assert_ran(langadapt("run", str(second), "--until", "data", "--force"))  # handed over: it runs
    assert_ran(langadapt("run", str(first), "--until", "data", "--force"))  # and back


def test_a_corpus_inside_the_run_folder_is_refused(tmp_path: Path) -> None:
    corpus = tmp_path / "nb.jsonl"
    corpus.write_bytes(jsonl(TEXTS))
    assert_ran(langadapt("run", str(recipe(tmp_path, corpus)), "--until", "data"))
    own = tmp_path / "runs" / "bad" / "data" / "train"
    result = langadapt("run", str(recipe(tmp_path, f"{own}/*.jsonl.gz")), "--dry-run")
    line = result[0].stderr
    assert result[0].returncode != 0 and "data.sources[0].path" in line and "inside this run's own folder" in line
    assert "Traceback" not in line and len([x for x in line.splitlines() if x.startswith("langadapt: error:")]) == 1


# --- 4. a suite that measures nothing ----------------------------------------------------------

def test_a_suite_language_without_data_is_refused_before_and_at_evaluation(tmp_path: Path) -> None:
    corpus = tmp_path / "nb.jsonl"
    corpus.write_bytes(jsonl(TEXTS))
    suite = tmp_path / "sv.yaml"
    suite.write_text("name: swedish\ntasks:\n  - {kind: bpb, langs: [sv]}\n  - {kind: tokenizer_metrics, langs: [sv]}\n")
    path = recipe(tmp_path, corpus, extra=f"evaluation:\n  suites: [{suite}]\n")
    assert_refused(langadapt("run", str(path), "--dry-run", "--from", "evaluate"), tmp_path, "evaluation.suites[0]",
                   "suite swedish", str(suite), "no held-out text for sv")
    # The evaluate stage itself, should the preflight prediction miss (held-out data lost): same line.
    with pytest.raises(LangadaptError, match=r"^evaluate: suite swedish .*no held-out text for sv \(held-out languages: nb\)"):
        plan_suites([load_suite(suite)], {"nb": TEXTS, "sv": []}, EvaluationConfig())
