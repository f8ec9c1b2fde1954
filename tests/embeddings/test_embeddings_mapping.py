"""Vocabulary mapping: tokens compared as bytes, never as their byte-level/SentencePiece spellings."""

from __future__ import annotations

import json

import pytest
from test_embeddings_support import (
    EN_TEXT,
    NB_TEXT,
    byte_level_tokenizer,
    sentencepiece_tokenizer,
)

from langadapt.embeddings import VocabMapping, build_mapping
from langadapt.embeddings.mapping import segment_bytes
from langadapt.embeddings.vocab import vocab_view


@pytest.fixture(scope="module")
def tokenizers():
    return {
        "en_bl": byte_level_tokenizer(EN_TEXT),
        "nb_bl": byte_level_tokenizer(NB_TEXT),
        "en_sp": sentencepiece_tokenizer(EN_TEXT),
        "nb_sp": sentencepiece_tokenizer(NB_TEXT),
    }


def _pieces_bytes(view, ids):
    return b"".join(view.token_bytes[i] for i in ids)


def test_spelling_kinds_are_detected(tokenizers):
    assert vocab_view(tokenizers["en_bl"]).kind == "byte_level"
    sp = vocab_view(tokenizers["en_sp"])
    assert sp.kind == "sentencepiece"
    assert len(sp.byte_fallback_ids) == 256
    assert sp.token_bytes[3 + 0xE5] == b"\xe5"  # <0xE5> is one byte
    assert sp.roles == {"unk": 0, "bos": 1, "eos": 2}


def test_byte_level_source_maps_norwegian_letters_to_their_byte_pieces(tokenizers):
    old, new = tokenizers["en_bl"], tokenizers["nb_bl"]
    mapping = build_mapping(old, new)
    new_id = new.convert_tokens_to_ids("ĠpÃ¥")  # " på" in byte-level spelling
    expected = old(" på", add_special_tokens=False)["input_ids"]
    assert mapping.status[new_id] == "decomposed"
    assert mapping.pieces[new_id] == expected
    assert old.convert_ids_to_tokens(expected) == ["Ġp", "Ã", "¥"]
    assert old.decode(mapping.pieces[new_id]) == " på"
    # The pitfall: re-tokenising the spelling "ĠpÃ¥" as text gives other, wrong pieces.
    assert old("ĠpÃ¥", add_special_tokens=False)["input_ids"] != expected

    old_view, new_view = vocab_view(old), vocab_view(new)
    letters = [
        i
        for i, b in enumerate(new_view.token_bytes)
        if b and any(c in b for c in (b"\xc3\xa5", b"\xc3\xb8", b"\xc3\xa6"))
    ]
    assert len(letters) >= 5
    for i in letters:
        assert mapping.status[i] in ("copied", "decomposed")
        assert _pieces_bytes(old_view, mapping.pieces[i]) == new_view.token_bytes[i]


def test_sentencepiece_source_maps_norwegian_letters_via_byte_fallback(tokenizers):
    old, new = tokenizers["en_sp"], tokenizers["nb_bl"]
    mapping = build_mapping(old, new)
    old_view = vocab_view(old)
    for spelling, text in [("ĠpÃ¥", " på"), ("Ã¥", "å"), ("ĠgÃ¥r", " går")]:
        new_id = new.convert_tokens_to_ids(spelling)
        pieces = old.convert_ids_to_tokens(mapping.pieces[new_id])
        assert _pieces_bytes(old_view, mapping.pieces[new_id]) == text.encode("utf-8"), (spelling, pieces)
        assert pieces[-2:] == ["<0xC3>", "<0xA5>"] or pieces[-3:-1] == ["<0xC3>", "<0xA5>"]
    # " på" with a leading space is the old tokenizer's own segmentation, "▁p" included.
    assert old.convert_ids_to_tokens(mapping.pieces[new.convert_tokens_to_ids("ĠpÃ¥")]) == [
        "▁p",
        "<0xC3>",
        "<0xA5>",
    ]


def test_sentencepiece_letter_is_not_the_byte_level_latin1_byte(tokenizers):
    """SentencePiece "å" is the letter (C3 A5); byte-level token "å" is the single byte E5."""
    old, new = tokenizers["en_bl"], tokenizers["nb_sp"]
    mapping = build_mapping(old, new)
    letter = new.convert_tokens_to_ids("å")
    assert old.convert_ids_to_tokens(mapping.pieces[letter]) == ["Ã", "¥"]
    byte_e5 = new.convert_tokens_to_ids("<0xE5>")
    assert mapping.status[byte_e5] == "copied"
    assert old.convert_ids_to_tokens(mapping.pieces[byte_e5]) == ["å"]


@pytest.mark.parametrize(
    "pair", [("en_bl", "nb_bl"), ("en_sp", "nb_bl"), ("en_bl", "nb_sp"), ("en_sp", "nb_sp")]
)
def test_every_regular_token_is_spelled_exactly_by_its_pieces(tokenizers, pair):
    old, new = tokenizers[pair[0]], tokenizers[pair[1]]
    mapping = build_mapping(old, new)
    old_view, new_view = vocab_view(old), vocab_view(new)
    for i, status in enumerate(mapping.status):
        if status in ("copied", "decomposed"):
            assert mapping.pieces[i], i
            assert _pieces_bytes(old_view, mapping.pieces[i]) == new_view.token_bytes[i], new_view.tokens[i]
        elif status == "fallback":
            assert i in new_view.specials  # only a special without counterpart (pad / unk) may fall back
    summary = mapping.summary()
    assert sum(summary[s] for s in ("copied", "decomposed", "special", "fallback")) == len(new)


def test_tokens_that_are_not_valid_utf8_decompose_at_byte_level(tokenizers):
    old, new = tokenizers["en_sp"], tokenizers["nb_bl"]
    mapping = build_mapping(old, new)
    old_view, new_view = vocab_view(old), vocab_view(new)
    partial = []
    for i, b in enumerate(new_view.token_bytes):
        try:
            b.decode("utf-8") if b else None
        except UnicodeDecodeError:
            partial.append(i)
    assert partial, "the Norwegian byte-level vocabulary should hold half characters such as 'Ã'"
    for i in partial:
        assert mapping.status[i] in ("copied", "decomposed")
        assert _pieces_bytes(old_view, mapping.pieces[i]) == new_view.token_bytes[i]


def test_bare_space_and_continuation_tokens_never_get_empty_or_prefixed_pieces(tokenizers):
    old, new = tokenizers["en_sp"], tokenizers["nb_sp"]
    assert old(" ", add_special_tokens=False)["input_ids"] != []  # ... but decodes to "" (dummy prefix)
    mapping = build_mapping(old, new)
    old_view = vocab_view(old)
    space = new.convert_tokens_to_ids("▁")
    assert mapping.pieces[space] and _pieces_bytes(old_view, mapping.pieces[space]) == b" "
    continuation = new.convert_tokens_to_ids("å")  # no leading "▁": must not get the old "▁" prefix
    assert _pieces_bytes(old_view, mapping.pieces[continuation]) == "å".encode()


def test_specials_map_by_role_not_by_id_or_name(tokenizers):
    old = tokenizers["en_bl"]  # <s>=0 bos, </s>=1 eos, <pad>=2 pad
    new = byte_level_tokenizer(NB_TEXT, specials=("<|begin|>", "<|end|>", "<|pad|>"))
    mapping = build_mapping(old, new)
    assert mapping.pieces[new.bos_token_id] == [old.bos_token_id]
    assert mapping.pieces[new.eos_token_id] == [old.eos_token_id]
    assert mapping.pieces[new.pad_token_id] == [old.pad_token_id]
    assert {mapping.status[i] for i in (new.bos_token_id, new.eos_token_id, new.pad_token_id)} == {"special"}
    # SentencePiece source: its bos/eos are ids 1/2, not 0/1.
    sp_mapping = build_mapping(tokenizers["en_sp"], new)
    assert sp_mapping.pieces[new.bos_token_id] == [1] and sp_mapping.pieces[new.eos_token_id] == [2]
    assert sp_mapping.status[new.pad_token_id] == "fallback"  # the old one has no pad: mean row, said so


def test_segment_bytes_finds_fewest_pieces_or_none():
    index = {b"a": 0, b"b": 1, b"ab": 2, b"abc": 3, b"c": 4}
    assert segment_bytes(b"abcab", index, 3) == [3, 2]
    assert segment_bytes(b"cab", index, 3) == [4, 2]
    assert segment_bytes(b"abd", index, 3) is None
    assert segment_bytes(b"", index, 3) is None


def test_mapping_saves_loads_and_summarises(tokenizers, tmp_path):
    old, new = tokenizers["en_bl"], tokenizers["nb_bl"]
    mapping = build_mapping(old, new)
    path = tmp_path / "mapping.json"
    mapping.save(path, old_tokens=old.convert_ids_to_tokens(list(range(len(old)))))
    doc = json.loads(path.read_text(encoding="utf-8"))
    entry = doc["tokens"][new.convert_tokens_to_ids("ĠpÃ¥")]
    assert entry["piece_tokens"] == ["Ġp", "Ã", "¥"] and entry["status"] == "decomposed"
    loaded = VocabMapping.load(path)
    assert loaded.pieces == mapping.pieces and loaded.status == mapping.status
    assert loaded.summary() == mapping.summary() == doc["summary"]
    assert (
        doc["summary"]["copied"] > 0 and doc["summary"]["decomposed"] > 0 and doc["summary"]["special"] == 3
    )
