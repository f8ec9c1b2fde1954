"""Texts and HF datasets into the packed stream, its torch IterableDataset, and HF Trainer on it."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from langadapt import PackedIterableDataset, build_stream, encode_texts, stream_from_texts
from langadapt.errors import LangadaptError

WORDS = ["blåbær", "ørret", "ærlig", "og", "i", "det", "som", "er", "på", "en", "til", "av", "for", "med", "har",
         "ikke", "den", "jeg", "tekst"]


def _texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 60))) + f" Avsnitt {i}." for i in range(n)]


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    """A small byte-level BPE trained here (no ../shared needed)."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(_texts(200, seed=1), trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>")


def _tokens(folder: Path) -> np.ndarray:
    meta = json.loads((folder / "meta.json").read_text())
    return np.fromfile(folder / "tokens.bin", dtype=meta["dtype"])


def test_list_dataset_and_streaming_dataset_give_the_same_shards(tokenizer, tmp_path: Path) -> None:
    from datasets import Dataset

    texts = _texts(50, seed=2)
    dataset = Dataset.from_dict({"text": texts, "id": list(range(50))})
    encode_texts(texts, tokenizer, tmp_path / "list")
    encode_texts(dataset, tokenizer, tmp_path / "dataset")
    encode_texts({"nb": dataset.to_iterable_dataset(num_shards=2)}, tokenizer, tmp_path / "streaming", lang="nb")
    listed = _tokens(tmp_path / "list" / "texts")
    expected = np.concatenate([[*tokenizer(t, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
                               for t in texts])
    assert np.array_equal(listed, expected)  # every text, in order, each followed by EOS
    assert np.array_equal(_tokens(tmp_path / "dataset" / "texts"), listed)
    assert np.array_equal(_tokens(tmp_path / "streaming" / "nb"), listed)
    meta = json.loads((tmp_path / "streaming" / "nb" / "meta.json").read_text())
    assert meta["num_docs"] == 50 and meta["lang"] == "nb" and meta["source"] == "nb"


def test_stream_mixes_sources_and_resumes_exactly(tokenizer, tmp_path: Path) -> None:
    sources = {"nb": _texts(120, seed=3), "en": (t.upper() for t in _texts(40, seed=4))}  # a generator too
    stream = stream_from_texts(sources, tokenizer, tmp_path, seq_len=32, total_samples=64, seed=7,
                               mixture={"nb": {"weight": 3}, "en": {"weight": 1}})
    assert stream.source_names == ["en", "nb"] and stream.plan.source("nb").tokens > 0
    stream.next_batch(8)
    state = json.loads(json.dumps(stream.state_dict()))  # as a checkpoint stores it
    expected = [stream.next_batch(8) for _ in range(3)]
    assert stream.counts[1] > 2 * stream.counts[0]  # the 3:1 mixture
    reopened = build_stream(tmp_path, {"nb": {"weight": 3}, "en": {"weight": 1}}, 32, 64, 7)  # no re-tokenising
    reopened.load_state_dict(state)
    assert all(np.array_equal(reopened.next_batch(8), batch) for batch in expected)


@pytest.mark.parametrize("bad, message", [
    ("one string", "pass a list of texts"),
    ([], "no texts in source texts"),
    ({"nb": ["a"], "en": ["", ""]}, "no texts in source en"),
    ([{"content": "x"}], "has no column 'text'"),
    ([1, 2], "item 0 is int"),
    ({"valid": ["x"]}, "invalid source name 'valid'"),
])
def test_bad_input_is_one_clear_error(tokenizer, tmp_path: Path, bad, message) -> None:
    with pytest.raises(LangadaptError, match=message):
        encode_texts(bad, tokenizer, tmp_path)
    assert not list(tmp_path.rglob("meta.json"))  # no shard marked complete


def test_a_dataset_dict_must_name_its_split(tokenizer, tmp_path: Path) -> None:
    from datasets import Dataset, DatasetDict

    splits = DatasetDict({"train": Dataset.from_dict({"text": ["a b"]}), "test": Dataset.from_dict({"text": ["c"]})})
    with pytest.raises(LangadaptError, match=r"pass one split, e.g. dataset\['train'\]"):
        encode_texts(splits, tokenizer, tmp_path)


def _stream(tokenizer, folder: Path, total: int = 24):
    return stream_from_texts(_texts(80, seed=5), tokenizer, folder, seq_len=16, total_samples=total, seed=1)


def test_iterable_dataset_deals_each_sample_once_over_dataloader_workers(tokenizer, tmp_path: Path) -> None:
    reference = _stream(tokenizer, tmp_path)
    rows = reference.next_batch(24)[:, :-1]
    single = list(PackedIterableDataset(_stream(tokenizer, tmp_path)))
    assert torch.equal(torch.stack([item["input_ids"] for item in single]), torch.from_numpy(rows))  # in order
    loader = torch.utils.data.DataLoader(PackedIterableDataset(_stream(tokenizer, tmp_path)), batch_size=4,
                                         num_workers=2)
    seen = torch.cat([batch["input_ids"] for batch in loader])
    assert sorted(map(tuple, seen.tolist())) == sorted(map(tuple, rows.tolist()))  # each exactly once
    ranks = [list(PackedIterableDataset(_stream(tokenizer, tmp_path), rank=r, world_size=2)) for r in (0, 1)]
    assert [len(r) for r in ranks] == [12, 12]
    assert torch.equal(ranks[1][0]["input_ids"], torch.from_numpy(rows[1]))
    for item in single:
        assert torch.equal(item["labels"], item["input_ids"])  # HF models shift labels themselves


def test_iterating_without_workers_advances_the_stream_for_resume(tokenizer, tmp_path: Path) -> None:
    stream = _stream(tokenizer, tmp_path)
    items = iter(PackedIterableDataset(stream))
    for _ in range(5):
        next(items)
    assert stream.samples == 5
    again = _stream(tokenizer, tmp_path)
    again.load_state_dict(stream.state_dict())
    assert torch.equal(next(iter(PackedIterableDataset(again)))["input_ids"], next(items)["input_ids"])


def test_hf_trainer_trains_a_tiny_llama_on_the_dataset(tokenizer, tmp_path: Path) -> None:
    from helpers.synthetic import tiny_llama
    from transformers import Trainer, TrainingArguments

    steps, batch = 4, 4
    stream = _stream(tokenizer, tmp_path / "tokens", total=steps * batch)
    model = tiny_llama(len(tokenizer))
    before = model.model.embed_tokens.weight.detach().clone()
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=steps, per_device_train_batch_size=batch,
                             learning_rate=1e-3, logging_steps=1, report_to=[], save_strategy="no",
                             use_cpu=True, dataloader_num_workers=0)
    trainer = Trainer(model=model, args=args, train_dataset=PackedIterableDataset(stream))
    result = trainer.train()
    assert trainer.state.global_step == steps and np.isfinite(result.training_loss)
    assert stream.samples == steps * batch  # every step read a fresh batch from the stream
    assert not torch.equal(model.model.embed_tokens.weight.detach(), before)


def test_document_masking_items_carry_positions_that_keep_documents_apart(tokenizer, tmp_path: Path) -> None:
    """With document masking the items carry position ids restarting after every EOS, and a HF
    model given them (and use_cache=False) scores each packed document as if it were alone."""
    from helpers.synthetic import tiny_llama

    stream = stream_from_texts(_texts(80, seed=5), tokenizer, tmp_path, seq_len=64, total_samples=4, seed=1,
                               document_masking=True)
    items = list(PackedIterableDataset(stream))
    eos = tokenizer.eos_token_id
    item = next(i for i in items if (i["input_ids"][:-1] == eos).sum() >= 1)
    ids, positions = item["input_ids"], item["position_ids"]
    start = int((ids == eos).nonzero()[0]) + 1  # the first document that starts inside the row
    assert positions[0] == 0 and positions[start] == 0 and torch.equal(positions[:start], torch.arange(start))
    model = tiny_llama(len(tokenizer), seed=0).eval()
    with torch.no_grad():
        packed = model(input_ids=ids[None], position_ids=positions[None], use_cache=False).logits[0]
        alone = model(input_ids=ids[None, start:], use_cache=False).logits[0]
        cached = model(input_ids=ids[None], position_ids=positions[None]).logits[0]  # use_cache: the default
    second = alone.shape[0] if (ids[start:] != eos).all() else int((ids[start:] == eos).nonzero()[0]) + 1
    assert torch.allclose(packed[start:start + second], alone[:second], atol=1e-5)
    # The pitfall the module docstring warns of: with a KV cache (transformers' default, in training
    # too) the position-id resets are not read as document starts and attention crosses them.
    assert not torch.allclose(cached[start:start + second], alone[:second], atol=1e-3)
    assert "position_ids" not in next(iter(PackedIterableDataset(_stream(tokenizer, tmp_path / "plain"))))
