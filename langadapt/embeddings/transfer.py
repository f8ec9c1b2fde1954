"""The library entry point: swap a model's vocabulary for a new tokenizer's, keeping its knowledge.

    model, report = transfer_embeddings(model, old_tokenizer, new_tokenizer, EmbeddingConfig())

Works on any `PreTrainedModel` whose embeddings `resize_token_embeddings` can resize (tested on
Llama/Mistral, Qwen2, Gemma, GPT-2, GPT-NeoX, BLOOM, OLMo, tied and untied). The model must be
a normal in-memory checkpoint, not a ZeRO-3 partitioned one (see `surgery`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import replace
from os import PathLike

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from langadapt.embeddings.mapping import VocabMapping, build_mapping
from langadapt.embeddings.methods import PlanInputs, build_plan
from langadapt.embeddings.row_plan import USE_MEAN, USE_WEIGHTS, USE_ZERO, RowPlan, apply_plan, copied_rows
from langadapt.embeddings.surgery import EmbeddingMatrices, read_matrices, set_special_ids, write_matrices
from langadapt.errors import LangadaptError
from langadapt.recipe.embeddings import EmbeddingConfig, default_head_init, head_init_problem
from langadapt.tokenizer.loading import load_tokenizer

TokenizerOrPath = PreTrainedTokenizerBase | str | PathLike[str]
"""A tokenizer object, or a folder `load_tokenizer` reads one from (a model folder or a saved tokenizer)."""


def _check_mapping(mapping: VocabMapping, old_rows: int) -> None:
    """Old piece ids must be rows of the model (the old tokenizer must belong to the model)."""
    highest = max((max(p) for p in mapping.pieces if p), default=-1)
    if highest >= old_rows:
        raise LangadaptError(
            f"old tokenizer id {highest} has no row in the model's {old_rows}-row embedding matrix: "
            "is the old tokenizer the base model's own?"
        )


HEAD_FILLS = {"mean_of_base_head": USE_MEAN, "zero": USE_ZERO}
"""`embeddings.head_init` -> how the head rows of tokens the base lacks are filled (`same`: the plan's own)."""


def head_plan(plan: RowPlan, shared: list[int], head_init: str) -> RowPlan:
    """The plan for an untied head: `plan` itself (`same`), or with every row that is not a base
    token's own (not in `shared`: new tokens, fallbacks, padding) set to the mean of the base's
    head rows or to zeros.

    Why a choice: a new token's head row decides how much probability the model gives that token
    in every context. Built like its input row (FVT: the mean of its pieces' head rows) it
    resembles the head rows of frequent pieces, so new tokens take probability from text the base
    predicted well (the source language); the mean of all head rows, or zero, gives each new token
    a near-constant logit instead, until training finds where it belongs.
    """
    if head_init == "same":
        return plan
    fill = plan.fill.clone()
    new = torch.ones(plan.rows, dtype=torch.bool)
    new[torch.as_tensor(shared, dtype=torch.long)] = False
    fill[new] = HEAD_FILLS[head_init]
    return replace(plan, fill=fill)


def apply_to_matrices(
    plan: RowPlan, old: EmbeddingMatrices, seed: int, head: RowPlan | None = None
) -> EmbeddingMatrices:
    """The plan applied to each matrix with that matrix's own rows (and statistics for random rows);
    the untied head and its bias by `head` where given. A bias's initializer rows are zeros (as a
    Linear's `_init_weights` leaves them)."""
    head = head or plan
    generator = torch.Generator().manual_seed(seed)
    return EmbeddingMatrices(
        input=apply_plan(plan, old.input, generator),
        output=None if old.tied else apply_plan(head, old.output, generator),
        bias=None if old.bias is None else apply_plan(replace(head, init_std=0.0), old.bias[:, None], generator)[:, 0],
    )


def tokenizer_object(tokenizer: TokenizerOrPath, what: str) -> PreTrainedTokenizerBase:
    """`tokenizer` itself, or the fast tokenizer of the folder it names; anything else is one clear error.

    Both tokenizers are read for their vocabularies and pipelines (`build_mapping`), which a path
    does not have: without this a path fails deep inside with an AttributeError on `str`."""
    if isinstance(tokenizer, str | PathLike):
        return load_tokenizer(tokenizer, f"transfer_embeddings: {what}")
    if not isinstance(tokenizer, PreTrainedTokenizerBase):
        raise LangadaptError(f"transfer_embeddings: {what} is {type(tokenizer).__name__}; pass a transformers "
                             "tokenizer (e.g. AutoTokenizer.from_pretrained(...)) or the path of its folder")
    return tokenizer


def transfer_embeddings(
    model: PreTrainedModel,
    old_tokenizer: TokenizerOrPath,
    new_tokenizer: TokenizerOrPath,
    config: EmbeddingConfig,
    corpus: Iterable[str] | None = None,
    seed: int = 0,
    mapping: VocabMapping | None = None,
) -> tuple[PreTrainedModel, dict]:
    """Resize `model` to `new_tokenizer` and initialise its input matrix and head with `config.method`.

    `corpus` (target-language texts) is needed by `focus` and `align`; `mapping` lets a caller
    that already built (and saved) one skip rebuilding it. Modifies `model` in place and returns
    it with a JSON-serialisable report (mapping summary, method, row counts, timings, and
    `shared_rows`: the ids of the rows copied bit for bit from a base row, the ones a training
    with `train_rows: new` keeps; see `plan.copied_rows`). Either tokenizer may be given as the
    path of its folder (read with `langadapt.tokenizer.loading.load_tokenizer`).
    """
    old_tokenizer = tokenizer_object(old_tokenizer, "old_tokenizer")
    new_tokenizer = tokenizer_object(new_tokenizer, "new_tokenizer")
    start = time.perf_counter()
    mapping = mapping or build_mapping(old_tokenizer, new_tokenizer)
    timings = {"mapping_s": time.perf_counter() - start}

    old = read_matrices(model)
    old_rows, dim = old.input.shape
    _check_mapping(mapping, old_rows)
    head_init = config.head_init or default_head_init(mapping.extends_base, old.tied)
    if problem := head_init_problem(head_init, old.tied, type(model).__name__):
        raise LangadaptError.at("embeddings.head_init", problem)
    rows = math.ceil(mapping.new_size / config.pad_vocab_to_multiple_of) * config.pad_vocab_to_multiple_of
    seed += config.seed_offset
    stamp = time.perf_counter()
    initializer_range = getattr(model.config.get_text_config(), "initializer_range", None)
    inputs = PlanInputs(mapping, rows, old_rows, old_tokenizer, new_tokenizer, config, corpus, seed, initializer_range)
    plan, info = build_plan(inputs)
    shared = copied_rows(plan, mapping)
    timings["plan_s"] = time.perf_counter() - stamp

    stamp = time.perf_counter()
    new = apply_to_matrices(plan, old, seed, head_plan(plan, shared, head_init))
    del old  # the old matrices are freed once the resize drops them from the model
    write_matrices(model, new)
    special_ids = set_special_ids(model, new_tokenizer)
    timings["apply_s"] = time.perf_counter() - stamp
    timings["total_s"] = time.perf_counter() - start

    report = {
        "method": config.method,
        "head_init": head_init,
        "mapping": mapping.summary(),
        "old_rows": old_rows,
        "new_rows": rows,
        "hidden_size": dim,
        "tied": new.tied,
        "head_bias": new.bias is not None,
        "rows_mean_filled": int((plan.fill == USE_MEAN).sum()),
        "rows_drawn": int(((plan.fill != USE_WEIGHTS) & (plan.fill != USE_MEAN)).sum()),
        "shared_rows": shared,
        "special_ids": special_ids,
        "timings_s": {k: round(v, 3) for k, v in timings.items()},
        **info,
    }
    return model, report
