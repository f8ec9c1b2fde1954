"""The task kinds that run on one in-memory model: held-out text, minimal pairs, generated samples.

Reading the data (with file:line errors) is separate from scoring, so every file is checked once,
before the first model is loaded.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from langadapt.data.bounded import FIXED_BOUND, iter_lines, read_whole_text
from langadapt.errors import LangadaptError
from langadapt.evaluation.bpb import model_device, prefix_token_id, sequence_loglikelihoods
from langadapt.evaluation.config import EvaluationConfig, GenerateOptions
from langadapt.ioerrors import decompression_errors


def read_texts(paths: list[str]) -> list[str]:
    """Documents from local files: JSONL (optionally .gz) with a `text` key, else one file = one document."""
    texts: list[str] = []
    for path in map(Path, paths):
        if path.name.endswith((".jsonl", ".jsonl.gz")):
            texts += [row["text"] for _, row in _jsonl_rows(path, required=("text",))]
        else:
            texts.append(read_whole_text(path, "evaluation data", FIXED_BOUND))
    return texts


def _jsonl_rows(path: Path, required: tuple[str, ...]):
    """Yield (line number, object) for each non-blank line; a bad line raises with file:line.

    Read by the one bounded reader (`langadapt.data.bounded`: a FIFO refused, decompressed by its
    magic bytes, a UTF-8 BOM dropped, a line over the bound or a truncated .gz/.zst one line naming
    the file)."""
    try:
        yield from _rows(path, required)
    except decompression_errors() as exc:
        raise LangadaptError(f"{path}: cannot read: {' '.join(str(exc).split()) or type(exc).__name__}") from None
    except UnicodeDecodeError as exc:
        raise LangadaptError(f"{path}: invalid UTF-8 ({exc.reason})") from None


def _rows(path: Path, required: tuple[str, ...]):
    for number, _, raw in iter_lines(path, "evaluation data", FIXED_BOUND):
        line = raw.decode("utf-8")
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise LangadaptError(f"{path}:{number}: malformed JSON ({exc.msg})") from None
        missing = [k for k in required if not isinstance(row, dict) or not isinstance(row.get(k), str)]
        if missing:
            raise LangadaptError(
                f"{path}:{number}: expected an object with string key(s) {', '.join(missing)}"
            )
        yield number, row


def cap_bytes(texts: list[str], max_bytes: int | None) -> list[str]:
    """The leading documents up to `max_bytes` UTF-8 bytes; the last one is cut on a character boundary."""
    if max_bytes is None:
        return list(texts)
    kept: list[str] = []
    left = max_bytes
    for text in texts:
        data = text.encode("utf-8")
        if len(data) >= left:
            cut = data[:left].decode("utf-8", errors="ignore")
            if cut:
                kept.append(cut)
            break
        kept.append(text)
        left -= len(data)
    return kept


def read_minimal_pairs(path: str | Path) -> list[tuple[str, str]]:
    """(good, bad) pairs from a JSONL file; a malformed line raises naming file:line."""
    pairs = [(row["good"], row["bad"]) for _, row in _jsonl_rows(Path(path), required=("good", "bad"))]
    if not pairs:
        raise LangadaptError(f"{path}: no minimal pairs in file")
    return pairs


def read_parallel(path: str | Path, langs: list[str]) -> list[dict[str, str]]:
    """Parallel rows ({lang: text} for `langs`; other keys ignored) from a JSONL file; a line
    without a string for every language raises naming file:line."""
    rows = [{lang: row[lang] for lang in langs} for _, row in _jsonl_rows(Path(path), required=tuple(langs))]
    if not rows:
        raise LangadaptError(f"{path}: no parallel rows in file")
    return rows


def minimal_pairs_accuracy(model, tokenizer, pairs: list[tuple[str, str]], config: EvaluationConfig) -> dict:
    """Share of pairs with ll(good) > ll(bad), whole-sentence log-likelihoods as lm-eval/BLiMP use.

    Sentences are scored like held-out text (first token conditioned on BOS); a tie counts as wrong.
    """
    goods, bads = [g for g, _ in pairs], [b for _, b in pairs]
    lls, _ = sequence_loglikelihoods(
        model, tokenizer, goods + bads, config.window, config.effective_stride, config.batch_size
    )
    margins = [g - b for g, b in zip(lls[: len(pairs)], lls[len(pairs) :])]
    return {
        "accuracy": sum(m > 0 for m in margins) / len(pairs),
        "pairs": len(pairs),
        "mean_margin_nats": sum(margins) / len(pairs),
    }


def left_padded(
    tokenizer, prompts: list[str], device: torch.device, max_tokens: int | None = None
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(input_ids, attention_mask, pad id) of `prompts` as one left-padded batch for `generate`.

    Same conditioning as scoring: BOS, then the prompt without special tokens. `max_tokens` keeps
    each prompt's last tokens (the start of a long few-shot prompt goes first, as lm-eval cuts)."""
    prefix = prefix_token_id(tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else prefix
    encoded = [[prefix] + tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    if max_tokens is not None:
        encoded = [ids[-max_tokens:] for ids in encoded]
    width = max(len(ids) for ids in encoded)
    input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in encoded], device=device)
    mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in encoded], device=device)
    return input_ids, mask, pad


@torch.inference_mode()
def generate_samples(model, tokenizer, prompts: dict[str, list[str]], options: GenerateOptions) -> dict:
    """{lang: [{"prompt", "text"}]}: all prompts in one left-padded batch, the seed reset per model
    so that every model draws from the same random stream."""
    torch.manual_seed(options.seed)
    flat = [(lang, prompt) for lang, items in prompts.items() for prompt in items]
    input_ids, mask, pad = left_padded(tokenizer, [p for _, p in flat], model_device(model))
    width = input_ids.shape[1]
    sampling = {"do_sample": True, "temperature": options.temperature, "top_p": options.top_p}
    out = model.generate(
        input_ids,
        attention_mask=mask,
        max_new_tokens=options.max_new_tokens,
        pad_token_id=pad,
        **(sampling if options.temperature > 0 else {"do_sample": False}),
    )
    samples: dict[str, list[dict]] = {}
    for (lang, prompt), row in zip(flat, out[:, width:]):
        continuation = tokenizer.decode(row, skip_special_tokens=True)
        samples.setdefault(lang, []).append({"prompt": prompt, "text": prompt + continuation})
    return samples
