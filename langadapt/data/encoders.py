r"""Text -> token ids for pre-tokenisation, with a tiktoken fast path proven equal to `tokenizers`.

A GPT-2-style byte-level BPE (byte-level pre-tokenizer with a split regex, no normaliser, vocab
ids in merge order) is exactly what tiktoken implements, and tiktoken encodes it about 4.7x
faster than `tokenizers` (benchmarks/data_prep.py). Nobody ships the conversion from a `tokenizer.json`, so it
is written here: the byte-level token strings are mapped back to bytes and become tiktoken's
mergeable ranks (rank = id, so the ids come out unchanged). Because "looks structurally the same"
is not a proof, `choose_encoder` also encodes a sample with both and falls back to `tokenizers`
on any difference (SentencePiece-style vocabularies, normalisers, prefix spaces, ...).

Inside tiktoken, GPT-2's split regex costs about as much as the BPE: its `\s+(?!\S)` lookahead
sends the whole pattern through fancy_regex's backtracking engine. `TextEncoder` cuts each text
where that lookahead decides (`lookahead_cuts`) and encodes the parts with the pattern minus the
lookahead, which the plain `regex` crate runs: the same ids for a third fewer instructions
(benchmarks/README.md, data_scale, session 16). Ids come back as numpy arrays, not as a Python
int per token copied into the shard one document at a time.

An `EncoderSpec` is plain picklable data, so worker processes build their own encoder from it.
"""

from __future__ import annotations

import json
import os
import re
from array import array
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from langadapt.errors import LangadaptError
from langadapt.inputs.text import read_input_json

# The split regex of tokenizers' ByteLevel pre-tokenizer (use_regex=True), i.e. GPT-2's.
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LOOKAHEAD = r"|\s+(?!\S)"
_GPT2_SPELLINGS = (GPT2_PATTERN, r"'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+")
"""GPT-2's regex as tokenizers and as tiktoken/transformers' TikTokenConverter spell it: the only
patterns `lookahead_cuts` is proven for (other patterns, e.g. Llama-3's or Tekken's, let a
letter piece start with a space or tab, so their whitespace runs end differently)."""
WHITE_SPACE = "\t-\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
r"""Unicode White_Space, what `\s` means to the Rust regex engines of tiktoken and tokenizers
(Python's `\s` would add \x1c-\x1f)."""
_MAX_WHITE_SPACE = 0x3000
# Edge cases added to every equivalence sample: accents, NFC/NFD, emoji, whitespace runs, digits.
_PROBES = [
    "Blåbærsyltetøy på brødskiva, ærlig talt! Ørret i Ålesund.",
    "Tabs\tand  double  spaces,\r\nCRLF lines\n\n\nand trailing   ",
    "Numbers 12345 67.89 1,000,000 and 'quotes' it's we'll they've",
    "Emoji 🙂👍🏽, CJK 漢字, combining e\u0301 vs \u00e9, math ∑∞≠",
    "  leading spaces and ÆØÅ æøå ÄÖÜ ß čšž",
    "Odd spaces\u2000\u2000x\u3000\u3000y\x85\x85z\xa0 w\x1c\x1d v \n 'll\n\n\t\tend  ",
]


@dataclass(frozen=True)
class EncoderSpec:
    """How to build an encoder in any process: `backend` is "tiktoken" or "tokenizers"."""

    backend: str
    tokenizer_json: str
    pattern: str | None = None


@dataclass(frozen=True)
class TokenizerInfo:
    """What the shard writer needs to know about a tokenizer."""

    tokenizer_json: str
    eos_id: int
    vocab_size: int


def load_tokenizer_info(tokenizer: Any) -> TokenizerInfo:
    """From a `PreTrainedTokenizerFast`, a tokenizer folder, or a tokenizer.json path.

    A folder is read without importing transformers (slow to import): tokenizer.json for the
    model, tokenizer_config.json (or config.json) for the EOS token.
    """
    if hasattr(tokenizer, "backend_tokenizer"):
        backend = tokenizer.backend_tokenizer
        if tokenizer.eos_token_id is None:
            raise LangadaptError(f"tokenizer {tokenizer.name_or_path or ''}: no EOS token; {EOS_HINT}")
        size = max(len(tokenizer), backend.get_vocab_size(with_added_tokens=True))
        return TokenizerInfo(backend.to_str(), int(tokenizer.eos_token_id), size)
    path = Path(tokenizer)
    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        raise LangadaptError(f"tokenizer: no tokenizer.json at {file}")
    from tokenizers import Tokenizer

    backend = Tokenizer.from_file(str(file))
    eos_id = _eos_id(file.parent, backend)
    return TokenizerInfo(backend.to_str(), eos_id, backend.get_vocab_size(with_added_tokens=True))


EOS_HINT = ("the token files put one between documents: add eos_token to its tokenizer_config.json "
            "(or set tokenizer.eos_token to one of tokenizer.special_tokens when training one)")


def _eos_id(folder: Path, backend: Any) -> int:
    """The EOS id of a tokenizer folder, read as transformers reads it (tokenizer_config.json, then
    special_tokens_map.json), else config.json's eos_token_id; the one rule preflight checks too."""
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        eos = _json_field(folder / name, "eos_token")
        eos = eos.get("content") if isinstance(eos, dict) else eos
        if isinstance(eos, str) and backend.token_to_id(eos) is not None:
            return int(backend.token_to_id(eos))
    eos_id = _json_field(folder / "config.json", "eos_token_id")
    if isinstance(eos_id, int) and not isinstance(eos_id, bool):
        return eos_id
    raise LangadaptError(f"tokenizer {folder}: no EOS token; {EOS_HINT}")


def _json_field(path: Path, key: str) -> Any:
    """`key` of the JSON object in `path`; None when the file is missing or not such an object."""
    if not path.is_file():
        return None
    try:
        value = read_input_json(path, f"tokenizer {path.parent}")
    except LangadaptError:
        return None
    return value.get(key) if isinstance(value, dict) else None


def eos_problem(folder: Path) -> str | None:
    """Why the tokenizer in `folder` gives the packer no EOS token, or None (also None when it has
    no readable tokenizer.json: other checks name that)."""
    from tokenizers import Tokenizer

    try:
        backend = Tokenizer.from_file(str(folder / "tokenizer.json"))
    except Exception:  # noqa: BLE001 - a missing or unreadable file is another check's line
        return None
    try:
        _eos_id(folder, backend)
    except LangadaptError as exc:
        return str(exc)
    return None


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's bytes_to_unicode table (byte-level BPE token strings -> bytes)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def tiktoken_pattern(tokenizer_json: str) -> str | None:
    """The split regex if the tokenizer is a plain GPT-2-style byte-level BPE, else None."""
    spec = json.loads(tokenizer_json)
    model = spec.get("model", {})
    if model.get("type") != "BPE" or model.get("dropout") or model.get("byte_fallback"):
        return None
    if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        return None
    normalizer = spec.get("normalizer")
    if normalizer and not (normalizer.get("type") == "Sequence" and not normalizer.get("normalizers")):
        return None
    if any(t.get("lstrip") or t.get("rstrip") or t.get("single_word") for t in spec.get("added_tokens", [])):
        return None
    pre = spec.get("pre_tokenizer") or {}
    if pre.get("type") == "ByteLevel" and pre.get("use_regex", True) and not pre.get("add_prefix_space"):
        return GPT2_PATTERN
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else []
    if len(steps) == 2 and steps[0].get("type") == "Split" and steps[1].get("type") == "ByteLevel":
        split, level = steps
        regex = split.get("pattern", {}).get("Regex")
        isolated = split.get("behavior") == "Isolated" and not split.get("invert")
        if regex and isolated and not level.get("use_regex", True) and not level.get("add_prefix_space"):
            return regex
    return None


def _tiktoken_encoding(tokenizer_json: str, pattern: str) -> Any:
    """Build the tiktoken Encoding: byte-level strings -> bytes, rank = id, added tokens special."""
    import tiktoken

    spec = json.loads(tokenizer_json)
    added = {t["content"]: t["id"] for t in spec.get("added_tokens", [])}
    added_ids = set(added.values())
    decoder = _byte_decoder()
    ranks: dict[bytes, int] = {}
    for token, token_id in spec["model"]["vocab"].items():
        if token_id in added_ids:
            continue
        if any(ch not in decoder for ch in token):
            raise ValueError(f"token {token!r} is not byte-level")
        ranks[bytes(decoder[ch] for ch in token)] = token_id
    if any(bytes([b]) not in ranks for b in range(256)):
        raise ValueError("byte alphabet incomplete")
    return tiktoken.Encoding(name="langadapt", pat_str=pattern, mergeable_ranks=ranks, special_tokens=added)


def lookahead_cuts(text: str) -> list[int]:
    r"""Where GPT-2's `\s+(?!\S)` ends a piece that plain `\s+` would not: before the last
    character of every whitespace run of two or more that a non-space follows.

    There the run splits into run[:-1] and a piece starting at its last character (" word" when
    that is a space). Every other run is one piece under both patterns (a single space or tab
    before a word, a run at the end), and no other alternative of GPT-2's regex matches a
    whitespace character, so the parts between cuts split alike with or without the lookahead.
    Found with numpy on the code points: a third fewer instructions than `re`, which tests a
    ten-range class at every character."""
    points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    edges = np.zeros(points.size + 2, dtype=np.int8)
    edges[1:-1] = _white_space_table()[np.minimum(points, _MAX_WHITE_SPACE + 1)]
    steps = np.diff(edges)
    starts, ends = np.flatnonzero(steps == 1), np.flatnonzero(steps == -1)
    return (ends[(ends - starts >= 2) & (ends < points.size)] - 1).tolist()


@lru_cache(maxsize=1)
def _white_space_table() -> np.ndarray:
    """int8 by code point up to U+3001: 1 where `WHITE_SPACE` matches."""
    table = np.zeros(_MAX_WHITE_SPACE + 2, dtype=np.int8)
    text = "".join(map(chr, range(table.size)))
    for match in re.finditer(f"[{WHITE_SPACE}]", text):
        table[match.start()] = 1
    return table


class TextEncoder:
    """Texts -> token ids, no BOS/EOS added, built from an `EncoderSpec` in the process using it."""

    def __init__(self, spec: EncoderSpec) -> None:
        self.backend = spec.backend
        self._plain: Any = None
        """GPT-2's tiktoken encoding without the lookahead, for the parts between cuts; None: no cuts."""
        self._special: re.Pattern[str] | None = None
        """Any added token's string: a text holding one takes tiktoken's own path."""
        if spec.backend == "tiktoken":
            pattern = spec.pattern or GPT2_PATTERN
            self._encoding = _tiktoken_encoding(spec.tokenizer_json, pattern)
            if pattern in _GPT2_SPELLINGS:
                self._plain = _tiktoken_encoding(spec.tokenizer_json, pattern.replace(_LOOKAHEAD, ""))
                # one alternation: one scan per text whatever the number of added tokens
                specials = sorted(self._encoding.special_tokens_set, key=len, reverse=True)
                self._special = re.compile("|".join(map(re.escape, specials))) if specials else None
            return
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # the caller parallelises by process
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_str(spec.tokenizer_json)

    def arrays(self, texts: list[str]) -> list[np.ndarray]:
        """One uint32 id array per text."""
        if self.backend == "tokenizers":
            return [np.frombuffer(array("I", e.ids), dtype=np.uint32)
                    for e in self._tokenizer.encode_batch(texts, add_special_tokens=False)]
        return [self._encode_one(text) for text in texts]

    def __call__(self, texts: list[str]) -> list[list[int]]:
        """One id list per text (what `tokenizers` returns, for comparing with it)."""
        return [ids.tolist() for ids in self.arrays(texts)]

    def _encode_one(self, text: str) -> np.ndarray:
        # A special token in the text is matched before any regex, so a cut next to it would be
        # wrong: such (rare) texts take tiktoken's own path.
        if self._plain is None or (self._special and self._special.search(text)):
            return self._encoding.encode_to_numpy(text, allowed_special="all")
        encode, ids, start = self._plain.encode_ordinary, [], 0
        for cut in lookahead_cuts(text):
            ids += encode(text[start:cut])
            start = cut
        ids += encode(text[start:])
        return np.frombuffer(array("I", ids), dtype=np.uint32)  # np.array(ids) costs as much as the BPE


def build_encoder(spec: EncoderSpec) -> TextEncoder:
    """The encoder `spec` describes, for this process."""
    return TextEncoder(spec)


def choose_encoder(tokenizer_json: str, sample: list[str]) -> tuple[EncoderSpec, str]:
    """The fastest encoder proven equal to `tokenizers` on `sample` + edge cases; and why."""
    fallback = EncoderSpec("tokenizers", tokenizer_json)
    pattern = tiktoken_pattern(tokenizer_json)
    if pattern is None:
        return fallback, "tokenizer is not a plain byte-level BPE"
    fast = EncoderSpec("tiktoken", tokenizer_json, pattern)
    try:
        fast_ids = build_encoder(fast)(_PROBES + sample)
    except Exception as err:  # any failure to convert simply means: not equivalent
        return fallback, f"tiktoken conversion failed ({err})"
    reference = build_encoder(fallback)(_PROBES + sample)
    for i, (got, want) in enumerate(zip(fast_ids, reference)):
        if got != want:
            return fallback, f"tiktoken differs from tokenizers on sample text {i}"
    return fast, f"tiktoken identical to tokenizers on {len(sample) + len(_PROBES)} sample texts"
