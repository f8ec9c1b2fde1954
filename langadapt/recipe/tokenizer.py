"""The tokenizer stage's slice of the recipe.

`kind: inherit` (the default) trains a tokenizer of the base model's family and copies its
conventions (special tokens and their ids, normaliser, pre-tokeniser, BOS insertion, decoder,
chat template), so the new tokenizer is a drop-in for the old one and embedding transfer can map
special tokens by id. The other kinds pick a family explicitly; `keep_base` trains nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from langadapt.recipe.base import Config
from langadapt.recipe.languages import LanguageCode
from langadapt.recipe.slices import reads

DEFAULT_MAX_TRAINING_CHARS = 300_000_000
"""The training sample's bound when `max_training_chars` is unset, in characters. Chosen by measurement
(benchmarks/tokenizer_sample_bound.py): held-out fertility stops improving (< 0.5%) well below it on
every corpus measured; it costs ~1.1 GB of memory while sampling (the bottom-k holds the sample's text),
and a corpus smaller than it is used whole, as before the bound existed (the demo's ~2 MB)."""

TokenizerKind = Literal["inherit", "byte_bpe", "sentencepiece_bpe", "unigram", "keep_base", "extend"]


class TokenizerConfig(Config):
    """How to train the target-language tokenizer."""

    kind: TokenizerKind = "inherit"
    """inherit: the base tokenizer's family and conventions; byte_bpe: GPT-2/Llama-3 style; sentencepiece_bpe:
    Llama-2/Mistral style (▁ + byte fallback); unigram: SentencePiece unigram with byte fallback; keep_base:
    no new tokenizer (plain continual pretraining); extend: the base tokenizer with the language's own tokens
    appended by continued BPE training (every base token keeps its id, every base merge its rank; vocab_size
    is the final size)."""
    special_tokens: list[str] | None = None
    """Special tokens placed at ids 0.. in this order; None keeps the base tokenizer's (scratch: <s>, </s>,
    <pad>; plus <unk> first for the SentencePiece-style kinds)."""
    keep_specials: Literal["used", "all"] = "used"
    """Which of the base tokenizer's special (added) tokens a new vocabulary keeps, at ids 0.. in base order.
    used: those named by something: a role (bos/eos/unk/pad), the base's declared extra (additional) special
    tokens, its chat template, its post-processor, or this recipe (special_tokens, added_tokens, a *_token
    setting); placeholders nothing names (Llama-3's 251 <|reserved_special_token_N|>, Tekken's <SPECIAL_N>)
    are dropped. all: every one (Tekken: 1,000 of an 8,192 vocabulary). Not for extend and keep_base, which
    keep every base id; ignored when special_tokens lists them."""
    added_tokens: list[str] = Field(default_factory=list)
    """Extra never-split tokens placed right after the special tokens (e.g. chat or code markers); not special, so decoding keeps them."""
    vocab_size: int = Field(32768, le=4_194_304)
    """Total vocabulary size including special, added and byte-fallback tokens (NorMistral-7B: 32,768)."""
    min_frequency: int = Field(2, le=10**12)
    """A pair (BPE) or piece must occur at least this often in the training sample to become a token."""
    min_vocab_fraction: float = Field(default=0.5, ge=0.0, le=1.0)
    """Fail when the trained vocabulary is smaller than this share of vocab_size (0 accepts any size). A small
    corpus runs out of merges: the model, `plan` and the card would describe a vocabulary that was never
    built."""
    language_weights: dict[LanguageCode, float] | None = None
    """Per-language share of the training sample, e.g. {nb: 0.9, nn: 0.1}; other languages are left out. None:
    target-role documents only, in their natural proportions."""
    max_training_chars: int | Literal["all"] | None = None
    """Bound on the training sample in characters (a seeded random sample of whole documents, split by
    language_weights); None: 300,000,000, past which held-out fertility stopped improving
    (benchmarks/tokenizer_sample_bound.py; a smaller corpus is used whole); all: every document, however
    many."""
    split_digits: bool | None = None
    """True: every digit is its own pre-token (Llama-2/Mistral); False: remove a digit-splitting step; None:
    as the base tokenizer does (scratch: digits may merge)."""
    max_token_length: int | None = Field(24, le=10_000)
    """Longest token in characters, which keeps runs like '==========' out of the vocabulary; None: no limit."""
    character_coverage: float = 0.9995
    """SentencePiece-style kinds: share of character occurrences covered by the base alphabet; the rarest characters fall back to bytes."""
    bos_token: str | None = None
    """Token with the beginning-of-sequence role; None: the base tokenizer's (scratch: <s>)."""
    eos_token: str | None = None
    """Token with the end-of-sequence role; None: the base tokenizer's (scratch: </s>)."""
    pad_token: str | None = None
    """Token with the padding role; None: the base tokenizer's (scratch: <pad>)."""
    unk_token: str | None = None
    """Token with the unknown role; None: the base tokenizer's (scratch: <unk> for the SentencePiece-style kinds, none for byte-level BPE)."""

    @field_validator("min_frequency", "max_training_chars", "max_token_length")
    @classmethod
    def _positive(cls, value: int | str | None, info: ValidationInfo) -> int | str | None:
        if isinstance(value, int) and value < 1:
            raise ValueError(f"{info.field_name}={value} must be at least 1")
        if info.field_name == "max_training_chars" and isinstance(value, int) and value > 10**15:
            raise ValueError(f"max_training_chars={value} is more text than any corpus (at most 10**15; all: no bound)")
        return value

    @field_validator("character_coverage")
    @classmethod
    def _coverage(cls, value: float) -> float:
        if not 0.0 < value <= 1.0:
            raise ValueError(f"character_coverage={value} must be in (0, 1]")
        return value

    @field_validator("language_weights")
    @classmethod
    def _weights(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        if value is None:
            return value
        bad = {lang: w for lang, w in value.items() if w < 0}
        if bad:
            raise ValueError(f"language_weights {bad} must not be negative")
        if not any(w > 0 for w in value.values()):
            raise ValueError("language_weights must give at least one language a positive weight")
        return value

    @field_validator("vocab_size")
    @classmethod
    def _vocab_size(cls, value: int, info: ValidationInfo) -> int:
        # special_tokens and added_tokens are declared before vocab_size, so they are in info.data.
        fixed = len(info.data.get("special_tokens") or []) + len(info.data.get("added_tokens") or [])
        if value <= fixed:
            raise ValueError(f"vocab_size={value} is not larger than the {fixed} special and added tokens")
        return value

    @model_serializer(mode="wrap")
    def _without_default_specials(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """`keep_specials: used` (the default) is left out of the dumped recipe, so the tokenizer
        stage's fingerprint of a run made before the setting existed stays what it was: its finished
        stages are not re-run and keep the tokenizer they were built on (every base special; for
        bases whose specials are all named, such as Mistral-7B, GPT-2 and the demo's, that is what
        `used` gives too). A new run keeps the used ones."""
        dumped = handler(self)
        if self.keep_specials == "used":
            dumped.pop("keep_specials", None)
        return dumped

    @model_validator(mode="after")
    def _keeping_base_ids(self) -> TokenizerConfig:
        """keep_base and extend keep every base id: `keep_specials: used` written beside them is refused."""
        if self.kind in ("extend", "keep_base") and self.keep_specials == "used" \
                and "keep_specials" in self.model_fields_set:
            raise ValueError(f"keep_specials=used cannot be set with kind {self.kind}: every base id stays, "
                             "special tokens included (use kind inherit for a vocabulary without unused specials)")
        return self

    @model_validator(mode="after")
    def _extension_keeps_the_base(self) -> TokenizerConfig:
        """extend keeps the base's special tokens and pre-tokeniser: settings that change them are refused.
        split_digits is checked against the base itself (`tokenizer.extend.extension_problem`): it may
        restate the base's digit rule (Mistral-7B's tokenizer.model splits digits), not reverse it, and
        true on a base whose rule is unknown keeps digits out of the new tokens."""
        if self.kind != "extend":
            return self
        changed = ["special_tokens"] if self.special_tokens is not None else []
        changed += ["added_tokens"] if self.added_tokens else []
        if changed:
            raise ValueError(f"{changed[0]} cannot be set with kind extend: every base token, special token and "
                             "pre-tokenisation rule stays as the base has it (use kind inherit to change them)")
        return self

    @model_validator(mode="after")
    def _roles_are_special(self) -> TokenizerConfig:
        if self.special_tokens is None:
            return self
        for role in ("bos_token", "eos_token", "pad_token", "unk_token"):
            token = getattr(self, role)
            if token is not None and token not in self.special_tokens:
                raise ValueError(f"{role}={token!r} is not one of special_tokens {self.special_tokens}")
        if len(set(self.special_tokens + self.added_tokens)) != len(self.special_tokens + self.added_tokens):
            raise ValueError("special_tokens and added_tokens must not repeat a token")
        return self


@dataclass(frozen=True)
class TokenizerSlice:
    """What the tokenizer stage reads of the recipe."""

    # min_vocab_fraction only decides whether a trained tokenizer is accepted, never what it is
    config: TokenizerConfig = reads("tokenizer", ignores=("tokenizer.min_vocab_fraction",))
    num_workers: int | None = reads(why="the same shards whatever the number", default=None)
    """The recipe's data.num_workers: processes that encode the token shards (None: every core, one
    for a small corpus). The shards are the same whatever it is, so it is in no fingerprint."""
