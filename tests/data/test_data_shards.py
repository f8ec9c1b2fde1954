"""Token shards: the tiktoken fast path equals `tokenizers`, shards round-trip, held-out stays out."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from langadapt.data import shards
from langadapt.data.documents import read_documents
from langadapt.data.encoders import EncoderSpec, build_encoder, choose_encoder, load_tokenizer_info
from langadapt.data.shards import encode_corpus, shard_dtype
from langadapt.data.stage import run
from langadapt.errors import LangadaptError
from langadapt.recipe.data import DataConfig, DataSlice
from langadapt.run.context import StageContext

WORDS = ["blåbær", "ørret", "ærlig", "og", "i", "det", "som", "er", "på", "en", "til", "av", "for", "med",
         "har", "ikke", "den", "jeg", "2024", "tekst,", "«sitat»"]


def _texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 80))) + f"\n\nAvsnitt {i}." for i in range(n)]


def _save(tokenizer: Tokenizer, folder: Path, eos: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": eos}))
    return folder


@pytest.fixture(scope="module")
def bpe_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small byte-level BPE trained here (no ../shared needed), GPT-2 style like tiny-en-llama."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(_texts(300, seed=5), trainer)
    return _save(tokenizer, tmp_path_factory.mktemp("bpe"), "</s>")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("run")
    src = root / "nb.jsonl"
    src.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in _texts(400)))
    config = DataConfig.model_validate(
        {"sources": [{"name": "nb", "path": str(src), "lang": "nb"}], "valid_fraction": 0.1}
    )
    ctx = StageContext(run_dir=root, stage="data", seed=0)
    ctx.out.mkdir()
    run(DataSlice(config), ctx)
    return ctx.out


def test_tiktoken_fast_path_is_identical_to_tokenizers_on_shared_text(tiny_en_llama: Path, shared_texts) -> None:
    names = ["nb.debian-handbook.valid", "nn.gimp-help.valid", "en.python-docs.valid", "fi.gimp-help.valid",
             "da.gimp-help.valid", "sv.debian-handbook.valid"]
    texts = [t for name in names for t in shared_texts(name, limit=40)]
    info = load_tokenizer_info(tiny_en_llama)
    spec, why = choose_encoder(info.tokenizer_json, texts[:5])
    assert spec.backend == "tiktoken", why
    fast = build_encoder(spec)(texts)
    slow = build_encoder(EncoderSpec("tokenizers", info.tokenizer_json))(texts)
    assert len(fast) == len(texts) and sum(map(len, fast)) > 10_000
    assert fast == slow


def test_shards_round_trip_and_held_out_never_reaches_training(data_dir: Path, bpe_dir: Path, tmp_path: Path) -> None:
    summary = encode_corpus(bpe_dir, data_dir, tmp_path / "tokens", num_workers=1)
    assert summary["backend"] == "tiktoken" and summary["dtype"] == "uint16"
    tokenizer = Tokenizer.from_file(str(bpe_dir / "tokenizer.json"))
    eos = tokenizer.token_to_id("</s>")
    for split, folder in (("train", tmp_path / "tokens" / "nb"), ("valid", tmp_path / "tokens" / "valid" / "nb")):
        meta = json.loads((folder / "meta.json").read_text())
        tokens = np.memmap(folder / "tokens.bin", dtype=meta["dtype"], mode="r")
        offsets = np.load(folder / "doc_offsets.npy")
        docs = [d["text"] for d in read_documents(data_dir / split / "nb.jsonl.gz")]
        assert meta["num_docs"] == len(docs) == len(offsets) - 1
        assert meta["num_tokens"] == tokens.size == offsets[-1]
        assert (meta["eos_id"], meta["lang"], meta["role"], meta["source"]) == (eos, "nb", "target", "nb")
        assert np.all(tokens[offsets[1:] - 1] == eos)  # every document ends with EOS ...
        assert np.count_nonzero(tokens == eos) == len(docs)  # ... and EOS occurs nowhere else
        decoded = [tokenizer.decode(tokens[a : b - 1].tolist()) for a, b in zip(offsets[:-1], offsets[1:])]
        assert decoded == docs
        if split == "train":
            train_decoded = set(decoded)
    valid_docs = {d["text"] for d in read_documents(data_dir / "valid" / "nb.jsonl.gz")}
    assert valid_docs and not valid_docs & train_decoded


def test_output_is_identical_with_several_workers(
    data_dir: Path, bpe_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shards, "BATCH_CHARS", 2_000)  # many small batches: order must hold
    one = encode_corpus(bpe_dir, data_dir, tmp_path / "one", num_workers=1, include_valid=False)
    two = encode_corpus(bpe_dir, data_dir, tmp_path / "two", num_workers=2, include_valid=False)
    assert two["workers"] == 2 and one["sources"]["nb"]["num_tokens"] == two["sources"]["nb"]["num_tokens"]
    for name in ("tokens.bin", "doc_offsets.npy"):
        assert (tmp_path / "one" / "nb" / name).read_bytes() == (tmp_path / "two" / "nb" / name).read_bytes()


LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def test_llama3_style_split_regex_also_takes_the_fast_path() -> None:
    from tokenizers import Regex

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=["<|end_of_text|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    texts = _texts(200, seed=9) + ["Tall 1234567 og\r\n\r\nlinjer  med   mellomrom", "I'LL we'Re"]
    tokenizer.train_from_iterator(texts, trainer)
    spec, why = choose_encoder(tokenizer.to_str(), texts[:20])
    assert spec.backend == "tiktoken" and spec.pattern == LLAMA3_PATTERN, why
    assert build_encoder(spec)(texts) == [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=False)]


def test_not_byte_level_falls_back_to_tokenizers(data_dir: Path, tmp_path: Path) -> None:
    vocab = {"<unk>": 0, "</s>": 1, **{w: i + 2 for i, w in enumerate(dict.fromkeys(WORDS + ["Avsnitt"]))}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    folder = _save(tokenizer, tmp_path / "wl", "</s>")
    summary = encode_corpus(folder, data_dir, tmp_path / "tokens", num_workers=1, include_valid=False)
    assert summary["backend"] == "tokenizers" and "not a plain byte-level BPE" in summary["backend_reason"]
    first = next(read_documents(data_dir / "train" / "nb.jsonl.gz"))["text"]
    tokens = np.fromfile(tmp_path / "tokens" / "nb" / "tokens.bin", dtype=np.uint16)
    want = tokenizer.encode(first).ids + [1]
    assert tokens[: len(want)].tolist() == want


def test_vocab_too_big_for_uint16(data_dir: Path, tmp_path: Path) -> None:
    vocab = {"<unk>": 0, "</s>": 1, **{f"w{i}": i + 2 for i in range(70_000)}, "blåbær": 70_002}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    folder = _save(tokenizer, tmp_path / "big", "</s>")
    with pytest.raises(LangadaptError, match=r"^tokenizer vocab of 70003 does not fit uint16 shards .* for sources nb"):
        encode_corpus(folder, data_dir, tmp_path / "t16", dtype="uint16")
    summary = encode_corpus(folder, data_dir, tmp_path / "t32", num_workers=1, include_valid=False)
    assert summary["dtype"] == "uint32"
    tokens = np.fromfile(tmp_path / "t32" / "nb" / "tokens.bin", dtype=np.uint32)
    assert tokens.max() == 70_002  # survives: would wrap around in uint16


def test_shard_dtype_boundaries() -> None:
    assert shard_dtype(65_536) == np.uint16 and shard_dtype(65_537) == np.uint32
    assert shard_dtype(100, "uint32") == np.uint32


def test_accepts_a_transformers_tokenizer_object(data_dir: Path, bpe_dir: Path, tmp_path: Path) -> None:
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(bpe_dir / "tokenizer.json"), eos_token="</s>")
    by_object = encode_corpus(tokenizer, data_dir, tmp_path / "a", num_workers=1, include_valid=False)
    by_path = encode_corpus(bpe_dir, data_dir, tmp_path / "b", num_workers=1, include_valid=False)
    assert by_object["eos_id"] == by_path["eos_id"] == 1
    assert (tmp_path / "a/nb/tokens.bin").read_bytes() == (tmp_path / "b/nb/tokens.bin").read_bytes()


def test_real_corpus_end_to_end_stage_shards_stream(tmp_path: Path, shared_dir: Path, tiny_en_llama: Path) -> None:
    """The pipeline's path: stage -> encode_corpus -> build_stream(stream_mixture(config))."""
    from langadapt.data.stream import build_stream
    from langadapt.recipe.data import stream_mixture

    corpora = shared_dir / "corpora"
    config = DataConfig.model_validate({"sources": [
        {"name": "nb", "path": str(corpora / "nb.debian-handbook.valid.jsonl.gz"), "lang": "nb", "epochs": 2},
        {"name": "en", "path": str(corpora / "en.gimp-help.valid.jsonl.gz"), "lang": "en", "role": "replay",
         "weight": 1},
    ], "valid_fraction": 0.15})
    ctx = StageContext(run_dir=tmp_path, stage="data", seed=0)
    run(DataSlice(config), ctx)
    summary = encode_corpus(tiny_en_llama, ctx.out, tmp_path / "tokens")
    assert summary["backend"] == "tiktoken"
    stream = build_stream(tmp_path / "tokens", stream_mixture(config), 128, 1_500, seed=0)
    assert stream.plan.source("nb").epochs == pytest.approx(2, rel=0.01)
    tokenizer = Tokenizer.from_file(str(tiny_en_llama / "tokenizer.json"))
    train_text = {name: "</s>".join(d["text"] for d in read_documents(ctx.out / "train" / f"{name}.jsonl.gz"))
                  for name in ("nb", "en")}
    held_out = [d["text"] for name in ("nb", "en") for d in read_documents(ctx.out / "valid" / f"{name}.jsonl.gz")]
    assert held_out
    for row in stream.next_batch(32):
        text = tokenizer.decode(row.tolist(), skip_special_tokens=False)
        # A window may cut a multi-byte character at either end: drop those partial bytes.
        pieces = [p.strip("\ufffd") for p in text.split("</s>") if len(p) > 20]
        assert all(any(p in t for t in train_text.values()) for p in pieces)
        assert not any(p in h for p in pieces for h in held_out if len(p) > 200)


def test_files_derived_from_a_private_corpus_stay_private(bpe_dir: Path, tmp_path: Path, caplog) -> None:
    """A corpus only its owner may read (here behind a symbolic link, as a link to /etc/shadow was)
    gives data files and token shards no wider than its target's mode; the link is named."""
    private = tmp_path / "private.jsonl"
    private.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in _texts(60)))
    private.chmod(0o600)
    link = tmp_path / "corpus.jsonl"
    link.symlink_to(private)
    config = DataConfig.model_validate({"sources": [{"name": "nb", "path": str(link), "lang": "nb"}],
                                        "valid_fraction": 0.001, "min_valid_documents": 3})
    ctx = StageContext(run_dir=tmp_path / "run", stage="data", seed=0)
    ctx.out.mkdir(parents=True)
    with caplog.at_level("INFO", logger="langadapt"):
        summary = run(DataSlice(config), ctx)
    assert summary["sources"]["nb"]["valid_floor_docs"] == 3  # both files rewritten by the floor
    assert f"{link}, a symbolic link to {private}" in caplog.text
    for split in ("train", "valid"):
        assert (ctx.out / split / "nb.jsonl.gz").stat().st_mode & 0o777 == 0o600
    encode_corpus(bpe_dir, ctx.out, tmp_path / "tokens", num_workers=1)
    for name in ("tokens.bin", "doc_offsets.npy"):
        assert (tmp_path / "tokens" / "nb" / name).stat().st_mode & 0o777 == 0o600


def test_a_worker_that_dies_while_encoding_is_one_error_not_a_hang(
        data_dir: Path, bpe_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """multiprocessing.Pool replaced a killed worker and waited forever for its batch (seen: a stage
    asleep for minutes after a worker was killed); the executor breaks and the stage says so."""
    monkeypatch.setattr(shards, "_encode_job", _killed_worker)
    monkeypatch.setattr(shards, "SMALL_CORPUS_BYTES", 0)
    with pytest.raises(LangadaptError, match="worker encoding source nb died"):
        encode_corpus(bpe_dir, data_dir, tmp_path / "tokens", num_workers=2)
    assert not (tmp_path / "tokens" / "nb" / "meta.json").exists()


def _killed_worker(*args: object) -> None:
    import os
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


def test_one_huge_document_enters_the_encoder_check_cut_to_the_sample(bpe_dir: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 38: a one-line corpus is one document; the encoder check (which also runs `tokenizers`,
    ~150 bytes of memory per byte) gets SAMPLE_CHARS of it, not all of it, and the shard still
    holds the whole document, encoded as `tokenizers` encodes it."""
    from langadapt.data.documents import write_documents

    huge = " ".join(_texts(400, seed=9))  # ~120,000 characters: above the sample
    monkeypatch.setattr(shards, "SAMPLE_CHARS", 10_000)
    data = tmp_path / "data"
    write_documents(data / "train" / "nb.jsonl.gz", iter([{"text": huge, "lang": "nb", "source": "nb",
                                                            "role": "target"}]))
    seen: list[list[str]] = []
    real = shards.choose_encoder
    monkeypatch.setattr(shards, "choose_encoder", lambda json_, sample: seen.append(sample) or real(json_, sample))
    summary = encode_corpus(bpe_dir, data, tmp_path / "tokens", num_workers=1, include_valid=False)
    assert sum(map(len, seen[0])) <= 10_001 < len(huge)
    assert seen[0] == [huge[:10_001]]
    tokens = np.memmap(tmp_path / "tokens" / "nb" / "tokens.bin", dtype=summary["dtype"], mode="r")
    tokenizer = Tokenizer.from_file(str(bpe_dir / "tokenizer.json"))
    assert tokens[:-1].tolist() == tokenizer.encode(huge, add_special_tokens=False).ids
