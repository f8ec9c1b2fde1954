"""The embeddings stage's slice of the recipe: which initialisation method, and its knobs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from langadapt.recipe.base import Config
from langadapt.recipe.slices import reads

Method = Literal["mean", "focus", "wechsel", "align", "transformers_resize", "model_init", "random_full_cov"]
HeadInit = Literal["same", "mean_of_base_head", "zero"]


def default_head_init(extends_base: bool, tied: bool | None) -> HeadInit | None:
    """`head_init` where nothing sets it: the mean of the base's head rows for the new tokens of an
    extension (every base id kept) on an untied base, `same` otherwise. Measured on the demo's page
    split (README "Three roads for the vocabulary", 2026-11-29): on the extension the mean head rows
    end level on Bokmål (1.6661 vs 1.6655 bits/byte) and better on every other language (English
    -0.2%, Finnish -1.3%; at step 0 English +2.6% vs the base against +10.9%); on a replacement they
    cost Bokmål 0.2% for no English; a tied base has one matrix, so only `same` can hold.

    The one rule for an unset head_init: the transfer applies it with the base's tie known
    (`embeddings.transfer`), a recipe's dump with `tied` None (the base is not read yet), where an
    extension's default is still open (None) and every other road's is `same` whatever the tie."""
    if not extends_base:
        return "same"
    if tied is None:
        return None
    return "same" if tied else "mean_of_base_head"


def head_init_problem(head_init: HeadInit | None, tied: bool, base: str = "the base") -> str | None:
    """Why `head_init` cannot hold on `base` (None: it can): a base with tied embeddings has ONE
    matrix, input and head alike, so there is no separate head row to choose and only `same` (or
    unset, whose default falls back to `same`) holds. Preflight says it before any stage runs, the
    transfer before it changes the model: one check, one message."""
    if tied and head_init not in (None, "same"):
        return (f"{head_init}: {base} ties its LM head to the input embeddings (one matrix), so the head rows "
                "are the input rows; use head_init: same")
    return None


class EmbeddingConfig(Config):
    """How the rows of the new vocabulary are filled (input matrix and output head alike).

    The defaults reproduce the NorMistral recipe (`mean`, i.e. FVT). Options of a method other
    than the chosen one are accepted and ignored, so a recipe can switch method with one
    `--set embeddings.method=...` override.

    `head_init` treats the untied LM head's rows of tokens the base lacks apart from their input
    rows: a new token's head row sets how much probability the token takes in every context, so a
    row built like its input row can take probability from the source language (issue 40). A base
    with tied embeddings (GPT-2, Gemma, Llama-3.2-1B) has ONE matrix, input and head alike: there
    is no separate head row to choose, and any head_init but `same` set explicitly is refused.
    Unset, it stays unset and is `default_head_init`'s (`Recipe` dumps it resolved as far as the
    recipe decides it, so its stage fingerprints are what they were before the default existed).
    """

    method: Method = "mean"
    """Initialisation: mean (FVT), focus, wechsel, align (corpus-weighted mean); baselines:
    transformers_resize (resize_token_embeddings' default), model_init (N(0, initializer_range)),
    random_full_cov (N(mean, cov), every row)."""
    head_init: HeadInit | None = None
    """Untied LM-head rows of tokens the base lacks: same (as `method` makes them), mean_of_base_head, zero;
    unset: mean_of_base_head on an extension (tokenizer.kind extend) of an untied base, same otherwise (a tied
    base has one matrix, so only same)."""
    seed_offset: int = Field(0, ge=0, le=2**30)
    """Added to the run seed for this stage's random draws (random rows, fastText training)."""
    pad_vocab_to_multiple_of: int = Field(1, ge=1, le=4096)
    """Round the new matrices' row count up to a multiple of this (e.g. 64 for tensor cores); extra rows get the mean row."""

    # --- focus (Dobler & de Melo 2023) --------------------------------------------------------
    fasttext_dim: int = Field(100, ge=2, le=4096)
    """Dimension of the auxiliary fastText token vectors FOCUS trains on the target corpus (paper: 100)."""
    fasttext_epochs: int = Field(3, ge=1, le=1000)
    """fastText training epochs (paper: 3); fewer run when `fasttext_time_budget_s` is exhausted."""
    fasttext_min_count: int = Field(10, ge=1, le=10**9)
    """Tokens seen fewer times than this get no fastText vector and are initialised like `focus_rare` says (paper: 10)."""
    fasttext_window: int = Field(5, ge=1, le=1000)
    """fastText context window in tokens."""
    fasttext_time_budget_s: float = Field(240.0, gt=0, le=10**7)
    """Stop fastText training this many seconds after FOCUS starts (corpus tokenisation included), even mid-epoch."""
    fasttext_workers: int = Field(0, ge=0, le=4096)
    """fastText threads; 0 = one per CPU core. Only 1 makes focus bit-reproducible (thread scheduling)."""
    max_corpus_mb: float = Field(100.0, gt=0, le=10**7)
    """Read at most this many megabytes (UTF-8) of target text for focus/align; bounds time and memory."""
    focus_center_vectors: bool = True
    """Subtract the mean fastText vector before cosine similarities (a fix for under-trained vectors; not in the paper)."""
    focus_rare: Literal["mean", "random"] = "mean"
    """How focus fills new tokens without a fastText vector: FVT mean of old pieces, or N(mean, cov) as in the paper."""

    # --- wechsel (Minixhofer et al. 2022) -----------------------------------------------------
    source_vectors: Path | None = None
    """Source-language word vectors: a fastText .bin (subword-aware) or word2vec text/.vec file; wechsel only."""
    target_vectors: Path | None = None
    """Target-language word vectors in the same formats as `source_vectors`; wechsel only."""
    dictionary: Path | None = None
    """Bilingual dictionary, one `source_word<TAB>target_word` pair a line, used to align the two spaces; wechsel only."""
    wechsel_k: int = Field(10, ge=1, le=100_000)
    """Number of nearest source tokens each new token is built from (paper: 10)."""
    wechsel_temperature: float = Field(0.1, gt=0, le=1000)
    """Softmax temperature over the k cosine similarities (paper: 0.1)."""

    @model_validator(mode="after")
    def _wechsel_needs_files(self) -> EmbeddingConfig:
        if self.method == "wechsel":
            missing = [
                name
                for name in ("source_vectors", "target_vectors", "dictionary")
                if getattr(self, name) is None
            ]
            if missing:
                raise ValueError(f"method 'wechsel' needs {', '.join(missing)} (local files)")
        return self


@dataclass(frozen=True)
class EmbeddingsSlice:
    """`init: warm`: the base model's embeddings moved to the new tokenizer."""

    config: EmbeddingConfig = reads("embeddings")


@dataclass(frozen=True)
class ScratchSlice:
    """`init: scratch`: a model drawn at random for the new tokenizer."""

    architecture: dict[str, Any] | None = reads("base_model.architecture")
    """base_model.architecture; None: the architecture of the base model's config (`ctx.base_model`)."""
