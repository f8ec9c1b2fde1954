"""Held-out bits-per-byte and per-word perplexity, defined as lm-evaluation-harness defines them.

Each document is scored on its own as a rolling log-likelihood; the totals are then pooled over
documents exactly like lm-eval's `bits_per_byte` and `word_perplexity` aggregations:

    bits_per_byte   = -(sum of log-likelihoods in nats) / (sum of UTF-8 bytes) / ln 2
    word_perplexity = exp(-(sum of log-likelihoods) / (sum of words))

with words counted as lm-eval counts them, `len(re.split(r"\\s+", text))`. Pooling (not a mean
of per-document rates) is what makes bpb comparable across tokenizers: the denominator is the
text itself, whatever it was cut into.

Conditioning: a document is tokenised WITHOUT special tokens and every one of its tokens is
scored; the first token is conditioned on one prefix token (BOS, or EOS when the tokenizer has no
BOS), as lm-eval does with `prefix_token_id`. The prefix is never scored itself, so no
probability mass is spent predicting a BOS the text does not contain.

Windows: a model sees at most `window` tokens at once. The first window scores the first
`window` tokens; each further window scores the next `stride` tokens, with the `window - stride`
tokens before them as extra context; the last window is right-aligned to the document's end, so
it gets as much context as fits. With `stride == window` this is lm-eval's scheme exactly
(disjoint windows, `context_len=1`, `max_length=window`), and that is our default
(window = stride = 512), checked against lm-eval to 1e-4 in the tests. Why not overlap by
default: on the corpus pack (whole manual pages, mostly longer than 512 tokens) half-overlapping
windows moved tiny-en-llama's bpb by under 0.5% (en 1.6985 -> 1.7027, nb 5.1576 -> 5.1544)
while costing twice the compute on long documents, and the disjoint scheme is the one published
lm-eval numbers use. Set `stride < window` for a true sliding window (every scored token after
the first window then has at least `window - stride` tokens of context; cost x window/stride).
The window is fixed in tokens, not taken from the model, so models with different context
lengths are scored alike; it is capped at the model's context length. Note that a model trained
on shorter sequences than the window (tiny-en-llama: 256) is scored partly out of distribution.

Batching: windows of all documents are sorted by length and packed into batches of at most
`batch_size * window` tokens (so `batch_size` full windows, or many more short ones),
right-padded. No attention mask is passed: under a causal mask, pad tokens placed AFTER the real
ones cannot change the real positions' logits, and the padded positions are never scored.
Only scored positions go through the output head, `HEAD_CHUNK_ROWS` at a time, so the full
logits tensor never exists (when `head(base_model(x))` is the model's forward; checked per call).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from langadapt.modeling import head_splits_cleanly

DEFAULT_WINDOW = 512
DEFAULT_STRIDE = 512


def default_batch_size(device: torch.device) -> int:
    """Full windows per forward pass when none is configured: 8 on GPUs, 1 on CPU.

    On CPU a 512-token window already fills the matrix units, and a batch's activations fall out
    of cache: with tiny-en-llama on 2 cores batch 1 scored 4,800 tokens/s, batch 8 4,000
    (benchmarks/README.md, eval_throughput). GPUs need the batch to fill the device.
    """
    return 8 if device.type == "cuda" else 1


@dataclass(frozen=True)
class Window:
    """One model call's worth of a document: input ids and the targets scored in it."""

    doc: int
    """Index of the document the window belongs to."""
    input_ids: list[int]
    """Tokens fed to the model (prefix token included for the first window)."""
    labels: list[int]
    """Next-token targets aligned with `input_ids`; only the last `n_scored` are scored."""
    n_scored: int
    """How many of the last positions are scored (earlier ones are context only)."""


def rolling_windows(doc: int, ids: list[int], prefix_id: int, window: int, stride: int) -> Iterator[Window]:
    """Cut one tokenised document into scoring windows (see the module docstring).

    With `seq = [prefix] + ids`, the logit at `seq[j]` predicts `ids[j]`; a window that scores
    targets `[a, b)` feeds `seq[max(0, b - window) : b]`.
    """
    if not 1 <= stride <= window:
        raise ValueError(f"need 1 <= stride <= window, got stride={stride}, window={window}")
    seq = [prefix_id] + ids
    a, b = 0, min(window, len(ids))
    while a < len(ids):
        lo = max(0, b - window)
        yield Window(doc, seq[lo:b], ids[lo:b], b - a)
        a, b = b, min(b + stride, len(ids))


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of the model's first parameter (where inputs must go)."""
    return next(model.parameters()).device


def prefix_token_id(tokenizer) -> int:
    """BOS if the tokenizer has one, else EOS: what lm-eval conditions the first token on."""
    for token_id in (tokenizer.bos_token_id, tokenizer.eos_token_id):
        if token_id is not None:
            return token_id
    raise ValueError("tokenizer has neither a BOS nor an EOS token to condition the first token on")


def context_length(model: torch.nn.Module) -> int | None:
    """The model's maximum sequence length from its config, if it declares one."""
    config = getattr(model, "config", None)
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def scoring_window(model: torch.nn.Module, window: int, stride: int) -> tuple[int, int]:
    """The (window, stride) that scoring `model` uses: `window` capped at the model's context length,
    `stride` at the window. The one place the cap is decided, so the report can state what was used."""
    limit = context_length(model)
    window = min(window, limit) if limit else window
    return window, min(stride, window)


HEAD_CHUNK_ROWS = 256
"""Scored positions pushed through the output head (and its cross-entropy) at a time.

The full [batch x window x vocab] logits are the largest tensor of evaluation (8 x 512 x 8,192
fp32 = 134 MB on the tiny model; 2 GB with a 128k vocabulary) and the softmax over them is
memory-bound. 256 rows of logits (8 MB at 8k) stay in cache: measured 0.40 s against 0.58 s
for head + cross-entropy of 4,096 positions on one CPU thread (benchmarks/eval_throughput.py)."""


@torch.inference_mode()
def _score_batch(model: torch.nn.Module, batch: list[Window], device: torch.device, split_head: bool) -> list[float]:
    """Sum of log-likelihoods (nats) of the scored targets of each window in the batch."""
    width = max(len(w.input_ids) for w in batch)
    inputs = torch.zeros(len(batch), width, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    for row, w in enumerate(batch):
        n = len(w.input_ids)
        inputs[row, :n] = torch.tensor(w.input_ids)
        labels[row, n - w.n_scored : n] = torch.tensor(w.labels[n - w.n_scored :])
    inputs, labels = inputs.to(device), labels.to(device)
    if not split_head:
        logits = model(input_ids=inputs, use_cache=False).logits
        # Flattened (rows x positions, vocab): the [B, V, T] layout a transpose gives is strided
        # and about 4x slower on CPU.
        nll = F.cross_entropy(logits.float().view(-1, logits.size(-1)), labels.view(-1), reduction="none")
        return (-nll.view(len(batch), width).double().sum(dim=1)).tolist()
    hidden = model.base_model(input_ids=inputs, use_cache=False).last_hidden_state
    scored = labels != -100  # padding and context-only positions never reach the head
    rows = scored.nonzero()[:, 0]
    hidden, targets = hidden[scored], labels[scored]
    head = model.get_output_embeddings()
    nll = torch.cat([
        F.cross_entropy(head(hidden[i : i + HEAD_CHUNK_ROWS]).float(), targets[i : i + HEAD_CHUNK_ROWS], reduction="none")
        for i in range(0, len(targets), HEAD_CHUNK_ROWS)
    ])
    totals = torch.zeros(len(batch), dtype=torch.float64, device=device).index_add_(0, rows, nll.double())
    return (-totals).tolist()


def sequence_loglikelihoods(
    model: torch.nn.Module,
    tokenizer,
    texts: list[str],
    window: int = DEFAULT_WINDOW,
    stride: int = DEFAULT_STRIDE,
    batch_size: int | None = None,
    device: torch.device | str | None = None,
) -> tuple[list[float], list[int]]:
    """Rolling log-likelihood (nats) of each text and its token count, in the order given.

    `window` is capped at the model's context length (and `stride` at the window) so a long
    default never silently runs past the positions the model was trained on.
    """
    texts = text_list(texts, "sequence_loglikelihoods")
    window, stride = scoring_window(model, window, stride)
    device = torch.device(device) if device is not None else model_device(model)
    batch_size = batch_size or default_batch_size(device)
    prefix = prefix_token_id(tokenizer)
    encoded = encode_documents(tokenizer, texts)
    windows = [w for i, ids in enumerate(encoded) for w in rolling_windows(i, ids, prefix, window, stride)]
    # Longest first: similar lengths share a batch (little padding) and an out-of-memory error,
    # if any, comes at the start rather than after most of the work.
    windows.sort(key=lambda w: len(w.input_ids), reverse=True)
    was_training = model.training
    model.eval()
    totals = [0.0] * len(texts)
    try:
        split_head = head_splits_cleanly(model, device)
        for batch in _batches(windows, batch_size * window):
            for w, ll in zip(batch, _score_batch(model, batch, device, split_head)):
                totals[w.doc] += ll
    finally:
        model.train(was_training)
    return totals, [len(ids) for ids in encoded]


def encode_documents(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    """Each whole document's ids, without special tokens, from the `tokenizers` pipeline itself.

    The transformers wrapper checks every encoded text against `model_max_length` and warns that
    running it "through the model will result in indexing errors": true of one forward pass over
    the whole text, false here, where a document is only cut into windows no longer than the
    context (`sequence_loglikelihoods` caps them). The pipeline gives the same ids with no check;
    a tokenizer without one (not a fast tokenizer) is called as it is, its warning included."""
    if not texts:
        return []
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return tokenizer(texts, add_special_tokens=False)["input_ids"]
    return [encoding.ids for encoding in backend.encode_batch(texts, add_special_tokens=False)]


def _batches(windows: list[Window], token_budget: int) -> Iterator[list[Window]]:
    """Consecutive windows (longest first) packed while rows x longest row <= `token_budget`.

    Full-length windows go `batch_size` at a time; short ones (minimal pairs, short documents)
    share one forward pass instead of paying per-call overhead for a few tokens each.
    """
    batch: list[Window] = []
    for w in windows:
        width = len(batch[0].input_ids) if batch else len(w.input_ids)
        if batch and (len(batch) + 1) * width > token_budget:
            yield batch
            batch = []
        batch.append(w)
    if batch:
        yield batch


def text_list(texts: Iterable[str], where: str) -> list[str]:
    """`texts` as a list of documents, refusing a lone string.

    A string is itself an iterable of strings, so `f(model, tok, "some text")` would score every
    character as its own document and return a plausible, wrong number (10.31 bits per byte
    instead of 4.51 for the demo export); a bytes object or a non-string document would fail later
    and obscurely. Both are refused here, naming the call."""
    if isinstance(texts, (str, bytes)):
        raise TypeError(f"{where}: texts must be a list of documents, not a single {type(texts).__name__}; "
                        f"pass [text] to score one text")
    listed = list(texts)
    for i, text in enumerate(listed):
        if not isinstance(text, str):
            raise TypeError(f"{where}: texts[{i}] is a {type(text).__name__}, not a str")
    return listed


def count_words(text: str) -> int:
    """Words as lm-eval counts them for `word_perplexity` (whitespace splits, empty ends count)."""
    return len(re.split(r"\s+", text))


def bits_per_byte(
    model: torch.nn.Module,
    tokenizer,
    texts: Iterable[str],
    window: int = DEFAULT_WINDOW,
    stride: int = DEFAULT_STRIDE,
    batch_size: int | None = None,
    device: torch.device | str | None = None,
) -> dict:
    """Pooled bits-per-byte and word perplexity of `texts`, a list of documents (empty ones are
    ignored; a single string is a TypeError, see `text_list`).

    Returns `bits_per_byte`, `nll_nats` (summed negative log-likelihood), `bytes`, `tokens`
    (scored tokens), `words`, `word_perplexity`, `tokens_per_second` (scored tokens over the
    wall time of the call, tokenisation included).
    """
    texts = [t for t in text_list(texts, "bits_per_byte") if t]
    if not texts:
        raise ValueError("bits_per_byte needs at least one non-empty text")
    started = time.perf_counter()
    lls, lengths = sequence_loglikelihoods(model, tokenizer, texts, window, stride, batch_size, device)
    elapsed = time.perf_counter() - started
    nll = -math.fsum(lls)
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    words = sum(count_words(t) for t in texts)
    tokens = sum(lengths)
    return {
        "bits_per_byte": nll / n_bytes / math.log(2),
        "nll_nats": nll,
        "bytes": n_bytes,
        "tokens": tokens,
        "words": words,
        "word_perplexity": math.exp(min(nll / words, 700.0)),
        "tokens_per_second": tokens / elapsed if elapsed > 0 else float("inf"),
    }
