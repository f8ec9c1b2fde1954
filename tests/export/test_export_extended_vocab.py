"""The export of an EXTENDED vocabulary (tokenizer.kind extend: the base's tokens at their ids, its
merges at their ranks, new tokens appended): every tokenizer file the folder ships encodes as the
run's tokenizer, whichever library reads it.

tokenizer.json is the run's own; tekken.json (mistral-common) is regenerated with the new tokens;
tokenizer.model (SentencePiece) cannot express continued merges and must not ship. The slow test
extends each real base (tests/helpers/real_bases.py) by a few hundred tokens learned on Norwegian,
exports it, and compares the ids of every backend that can load the folder with the run's
tokenizer on held-out Norwegian and English sentences and on texts glued from new tokens (where
tiktoken, which joins any adjacent pair whose join is a token, could part from the BPE's recorded
merges). The fast tests pin the detection, the Tekken regeneration and its refusals on hand-made
vocabularies, and the model card's sentence.
"""

from __future__ import annotations

import base64
import copy
import json
import random
import re
from pathlib import Path

import pytest
import torch
from helpers.real_bases import BASES
from test_real_bases_export import bases  # noqa: F401  (the fixture: real base folders, built once per module)

from langadapt.export.card import Exported, build_card
from langadapt.export.folder import write_model_folder
from langadapt.export.provenance import RunFacts
from langadapt.export.verify import probe, verify_folder
from langadapt.export.vocabulary import DROPPED_BECAUSE, extended_tekken, extends_vocabulary, token_bytes
from langadapt.recipe.export import ExportConfig
from langadapt.recipe.tokenizer import TokenizerConfig
from langadapt.run.layout import RunLayout
from langadapt.tokenizer.loading import load_tokenizer
from langadapt.tokenizer.saving import save_tokenizer
from langadapt.tokenizer.train import train_tokenizer

NEW_TOKENS = 300
SENTENCES = 200
"""Held-out sentences per language compared on every backend."""
GLUED = 500
"""Texts made of new tokens glued to others, compared on every backend."""


# --- detection and regeneration on hand-made vocabularies (fast) ---------------------------------

def bpe_json(vocab: dict[str, int], merges: list[list[str]], **parts) -> dict:
    """A minimal tokenizer.json document with a BPE model."""
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
            "pre_tokenizer": None, "post_processor": None, "decoder": None, **parts,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": False, "vocab": vocab, "merges": merges}}


def appended(base: dict, merges: list[tuple[str, str]]) -> dict:
    """`base` with one token per merge appended, as continued BPE writes it."""
    data = copy.deepcopy(base)
    model, next_id = data["model"], max(data["model"]["vocab"].values()) + 1
    for offset, (left, right) in enumerate(merges):
        model["vocab"][left + right] = next_id + offset
        model["merges"].append([left, right])
    return data


BASE = bpe_json({"a": 0, "b": 1, "c": 2, "ab": 3}, [["a", "b"]])


def test_an_appended_vocabulary_is_detected_and_others_are_not() -> None:
    extended = appended(BASE, [("ab", "c")])
    assert extends_vocabulary(extended, BASE)
    assert not extends_vocabulary(BASE, BASE)  # the same vocabulary: keep_base's road, not extend's
    assert not extends_vocabulary(BASE, extended)  # shrunk
    unrelated = bpe_json({"a": 0, "b": 1, "c": 2, "bc": 3, "abc": 4}, [["b", "c"], ["a", "bc"]])
    assert not extends_vocabulary(unrelated, BASE)
    moved = appended(BASE, [("ab", "c")])
    moved["model"]["vocab"].update({"ab": 4, "abc": 3})  # every base token must keep its id
    assert not extends_vocabulary(moved, BASE)
    reranked = appended(BASE, [("ab", "c")])
    reranked["model"]["merges"].reverse()  # every base merge must keep its rank
    assert not extends_vocabulary(reranked, BASE)
    for part, value in (("normalizer", {"type": "NFC"}), ("added_tokens", [{"id": 5, "content": "<x>"}])):
        assert not extends_vocabulary({**extended, part: value}, BASE), part
    assert not extends_vocabulary({**extended, "model": {**extended["model"], "byte_fallback": True}}, BASE)
    old_spelling = {**BASE, "model": {**BASE["model"], "merges": ["a b"]}}  # tokenizers < 0.20 wrote "a b"
    assert extends_vocabulary(extended, old_spelling)


SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]  # transformers' converter adds <pad> when it is missing
WORDS = "ab abc abcd cab bcab"


def tiny_tekken(merged: list[bytes], unused: list[bytes]) -> dict:
    """A Tekken vocabulary: 4 specials, the 256 bytes, `merged` at the next ranks, and `unused`
    ranks beyond default_vocab_size (real files hold more ranks than their models use)."""
    tokens = [bytes([i]) for i in range(256)] + merged + unused
    entries = [{"rank": r, "token_bytes": base64.b64encode(t).decode(), "token_str": None} for r, t in enumerate(tokens)]
    pattern = r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+|\s+"
    config = {"pattern": pattern, "num_vocab_tokens": len(tokens), "default_vocab_size": 4 + 256 + len(merged),
              "default_num_special_tokens": len(SPECIALS), "version": "v7"}
    specials = [{"rank": i, "token_str": s, "is_control": True} for i, s in enumerate(SPECIALS)]
    return {"config": config, "vocab": entries, "special_tokens": specials}


def converted(tekken: dict, tmp_path: Path) -> dict:
    """tekken.json converted to tokenizer.json by transformers (as tests/helpers/real_bases.py does)."""
    from transformers.integrations.mistral import convert_tekken_tokenizer

    path = tmp_path / "tekken.json"
    path.write_text(json.dumps(tekken))
    return json.loads(convert_tekken_tokenizer(str(path)).backend_tokenizer.to_str())


def tekkenizer(tekken: dict, path: Path):
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    path.write_text(json.dumps(tekken))
    return Tekkenizer.from_file(str(path))


def test_tekken_is_regenerated_with_the_new_tokens_and_encodes_like_the_bpe(tmp_path: Path) -> None:
    pytest.importorskip("mistral_common")
    from tokenizers import Tokenizer

    tekken = tiny_tekken([b"ab", b"cd"], unused=[b"abc", b"ca"])  # `abc` is unused in the base ...
    base = converted(tekken, tmp_path)
    # ... and new here, made from `ab`+`c`, then `c`+`ab`, then `ab`+`cd` (how the base splits `abcd`)
    ours = appended(base, [("ab", "c"), ("c", "ab"), ("ab", "cd")])
    assert extends_vocabulary(ours, base)
    regenerated = extended_tekken(tekken, ours, base)

    assert regenerated["config"] == {**tekken["config"], "default_vocab_size": 4 + 258 + 3, "num_vocab_tokens": 261}
    assert regenerated["vocab"][:258] == tekken["vocab"][:258]  # the base's ranks; its unused ones are cut
    assert regenerated["vocab"][258:] == [
        {"rank": 258, "token_bytes": base64.b64encode(b"abc").decode(), "token_str": "abc"},
        {"rank": 259, "token_bytes": base64.b64encode(b"cab").decode(), "token_str": "cab"},
        {"rank": 260, "token_bytes": base64.b64encode(b"abcd").decode(), "token_str": "abcd"}]
    bpe, tiktoken = Tokenizer.from_str(json.dumps(ours)), tekkenizer(regenerated, tmp_path / "tekken.json")
    for text in (WORDS, "xabcd cabab abcabc, ab-cd", "æøå abcd"):
        ids = bpe.encode(text, add_special_tokens=False).ids
        assert tiktoken.encode(text, bos=False, eos=False) == ids, text
    assert set(bpe.encode(WORDS, add_special_tokens=False).ids) >= {262, 263, 264}  # the new tokens are used


def test_a_tekken_that_cannot_express_the_vocabulary_is_refused(tmp_path: Path) -> None:
    tekken = tiny_tekken([b"ab", b"cd"], unused=[])
    base = converted(tekken, tmp_path)
    ours = appended(base, [("ab", "c"), ("abc", "d")])
    other = tiny_tekken([b"cd", b"ab"], unused=[])  # a tekken.json that is not this tokenizer.json's
    with pytest.raises(ValueError, match="is not tokenizer.json's id"):
        extended_tekken(other, ours, base)
    shorter = tiny_tekken([b"ab"], unused=[b"cd"])  # uses fewer ids than the base's tokenizer.json
    with pytest.raises(ValueError, match="describes 261 ids, the base's tokenizer.json 262"):
        extended_tekken(shorter, ours, base)
    swapped = copy.deepcopy(ours)  # `abcd` made before its part `abc`: no Tekken rank says that
    swapped["model"]["vocab"].update({"abc": 263, "abcd": 262})
    with pytest.raises(ValueError, match="does not rank after its parts"):
        extended_tekken(tekken, swapped, base)
    # `abcd` recorded as `abc`+`d`, but the model splits its bytes `ab`,`cd` and never makes it;
    # tiktoken joins `ab`,`cd` in " abcd" all the same:
    unreached = appended(base, [("ab", "c"), ("abc", "d")])
    with pytest.raises(ValueError, match=r"splits the new token 'abcd' into \['ab', 'cd'\]"):
        extended_tekken(tekken, unreached, base)
    assert token_bytes("Ġab") == b" ab"


def test_the_card_says_which_base_file_is_left_out_and_why(tmp_path: Path) -> None:
    facts = RunFacts(init="warm", base_hub_id=None, base_label="base", target_languages=("nb",), sources=())
    dropped = {"tokenizer.model": DROPPED_BECAUSE["tokenizer.model"]}
    card = str(build_card(RunLayout(tmp_path / "run"), facts, ExportConfig(), Exported("adapted", ("stage2",), {}, dropped)))
    tokenizer_section = card[card.index("## Tokenizer"):card.index("## Evaluation")]
    assert ("The base model's `tokenizer.model` is not included: SentencePiece merges pieces by score, not by "
            "the pair a merge joins, so it cannot express the extended vocabulary; `tokenizer.json` is this "
            "model's tokenizer.") in tokenizer_section
    plain = str(build_card(RunLayout(tmp_path / "run"), facts, ExportConfig(), Exported("adapted", ("stage2",), {})))
    assert "is not included" not in plain


# --- real bases, extended, exported, read by every library (slow) --------------------------------

def sentences(texts: list[str], count: int) -> list[str]:
    """The first `count` sentences (four words or more) of held-out documents."""
    found = [part for text in texts for line in text.splitlines() for part in re.split(r"(?<=[.!?])\s+", line)
             if len(part.split()) >= 4]
    assert len(found) >= count
    return found[:count]


@pytest.fixture(scope="module")
def held_out(shared_texts) -> dict[str, list[str]]:
    return {lang: sentences(shared_texts(f"{lang}.debian-handbook.valid"), SENTENCES) for lang in ("nb", "en")}


def run_folder(base: Path, texts: list[str], root: Path) -> Path:
    """The run's model folder as the export finds it: tokenizer stage -> embeddings stage -> model."""
    from transformers import AutoModelForCausalLM

    base_tokenizer = load_tokenizer(base)
    config = TokenizerConfig(kind="extend", vocab_size=len(base_tokenizer) + NEW_TOKENS)
    tokenizer = train_tokenizer(config, [("nb", t) for t in texts], base_tokenizer)
    save_tokenizer(tokenizer, root / "tokenizer")  # the tokenizer stage's save
    tokenizer = load_tokenizer(root / "tokenizer")
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    model.resize_token_embeddings(len(tokenizer))
    model.save_pretrained(root / "model")
    save_tokenizer(tokenizer, root / "model")  # the embeddings stage's save
    return root / "model"


def backends(folder: Path) -> dict[str, object]:
    """Every way a user's library reads the folder: name -> encode(text, special) -> ids."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    auto = AutoTokenizer.from_pretrained(folder)  # MistralCommonBackend when tekken.json ships
    fast = PreTrainedTokenizerFast.from_pretrained(folder)
    found = {f"AutoTokenizer ({type(auto).__name__})": lambda t, s: auto(t, add_special_tokens=s)["input_ids"],
             "PreTrainedTokenizerFast": lambda t, s: fast(t, add_special_tokens=s)["input_ids"]}
    if (folder / "tekken.json").is_file():
        from mistral_common.tokens.tokenizers.tekken import Tekkenizer

        tekken = Tekkenizer.from_file(str(folder / "tekken.json"))
        found["mistral_common Tekkenizer"] = lambda t, s: tekken.encode(t, bos=s, eos=False)
    if (folder / "tokenizer.model").is_file():
        import sentencepiece
        from transformers import LlamaTokenizer

        processor = sentencepiece.SentencePieceProcessor(model_file=str(folder / "tokenizer.model"))
        slow = LlamaTokenizer.from_pretrained(folder)
        found["sentencepiece"] = lambda t, s: [processor.bos_id()] * s + processor.encode(t)
        found["LlamaTokenizer"] = lambda t, s: slow(t, add_special_tokens=s)["input_ids"]
    return found


def glued(tokenizer, first_new: int, count: int = GLUED, seed: int = 0) -> list[str]:
    """Texts decoded from a new token glued to random other tokens: where a second encoder (tiktoken
    joins any adjacent pair whose join is a token) would part from the BPE's recorded merges."""
    rng = random.Random(seed)
    special = set(tokenizer.all_special_ids) | {int(i) for i in tokenizer.added_tokens_decoder}
    ordinary = [i for i in range(len(tokenizer)) if i not in special]
    new = [i for i in ordinary if i >= first_new]
    texts = []
    for _ in range(count):
        ids = [rng.choice(new)] + [rng.choice(new if rng.random() < 0.5 else ordinary) for _ in range(rng.randint(1, 3))]
        rng.shuffle(ids)
        texts.append(tokenizer.decode(ids))
    return texts


@pytest.mark.slow  # five real vocabularies (Tekken: 131,072 ids), each extended and exported: 2-3 minutes
@pytest.mark.parametrize("name", list(BASES))
def test_every_file_the_export_ships_encodes_like_the_run(name, bases, shared_texts, held_out, tmp_path):  # noqa: F811
    from transformers import AutoModelForCausalLM

    base = bases(name)
    source = run_folder(base, shared_texts("nb.debian-handbook.train", limit=80), tmp_path / "run")
    run_tokenizer, folder = load_tokenizer(source), tmp_path / "export"
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).eval()
    reference = probe(model, source, held_out["nb"][0])
    written = write_model_folder(model, source, str(base), folder, "float32", "2GB")
    verify_folder(folder, reference, "float32", max_new_tokens=2)  # the export stage's own check passes

    base_json = json.loads((base / "tokenizer.json").read_text())
    assert extends_vocabulary(json.loads((folder / "tokenizer.json").read_text()), base_json)
    shipped_by_base = {f for f in ("tokenizer.model", "tekken.json") if (base / f).is_file()}
    assert not (folder / "tokenizer.model").exists()
    assert written["dropped_vocabulary_files"] == {f: DROPPED_BECAUSE[f] for f in shipped_by_base - {"tekken.json"}}
    assert written["extended_vocabulary_files"] == sorted(shipped_by_base & {"tekken.json"})
    assert (folder / "tekken.json").is_file() == ("tekken.json" in shipped_by_base)
    assert written["base_vocabulary_files"] == []

    first_new = 1 + max([*base_json["model"]["vocab"].values(), *(a["id"] for a in base_json["added_tokens"])])
    assert len(run_tokenizer) == first_new + NEW_TOKENS
    texts = {**held_out, "glued": glued(run_tokenizer, first_new)}
    readers = backends(folder)
    assert any("MistralCommonBackend" in r for r in readers) == ("tekken.json" in shipped_by_base)  # it reads tekken.json
    for group, lines in texts.items():
        expected = {s: [run_tokenizer(t, add_special_tokens=s)["input_ids"] for t in lines] for s in (False, True)}
        # the comparison covers the new tokens, not only the base's
        assert sum(i >= first_new for ids in expected[False] for i in ids) > (len(lines) if group != "en" else 0)
        for reader, encode in readers.items():
            for special in (False, True):
                wrong = [t for t, ids in zip(lines, expected[special]) if encode(t, special) != ids]
                assert not wrong, f"{reader} (special tokens: {special}) differs on {len(wrong)} {group} texts: {wrong[:2]}"
