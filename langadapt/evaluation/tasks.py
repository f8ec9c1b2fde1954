"""The task kinds that run on one in-memory model: held-out text, minimal pairs, generated samples.

Their data is read by `evaluation.task_data` (no torch), so every file is checked once, by the
preflight check and before the first model is loaded.
"""

from __future__ import annotations

import math

import torch

from langadapt.evaluation.bpb import model_device, prefix_token_id, sequence_loglikelihoods
from langadapt.recipe.evaluation import EvaluationConfig, GenerateOptions


def accuracy_stderr(accuracy: float, n: int) -> float | None:
    """Standard error of an accuracy over `n` independent 0/1 outcomes, as lm-eval's `acc_stderr`.

    lm-eval computes it as the sample standard deviation of the 0/1 scores over sqrt(n)
    (`lm_eval.api.metrics.mean_stderr`), which for 0/1 data is sqrt(p(1-p)/(n-1)): the binomial
    sqrt(p(1-p)/n) with Bessel's correction. The same formula here, so a minimal-pairs accuracy
    and an lm-eval task's carry comparable error bars. None for fewer than two outcomes (no
    spread can be estimated from one; None, not NaN, so that results.json stays valid JSON)."""
    if not 0.0 <= accuracy <= 1.0:
        raise ValueError(f"accuracy_stderr: accuracy {accuracy} is not in [0, 1]")
    if n < 2:
        return None
    return math.sqrt(accuracy * (1.0 - accuracy) / (n - 1))


def minimal_pairs_accuracy(model, tokenizer, pairs: list[tuple[str, str]], config: EvaluationConfig) -> dict:
    """Share of pairs with ll(good) > ll(bad), whole-sentence log-likelihoods as lm-eval/BLiMP use.

    Sentences are scored like held-out text (first token conditioned on BOS); a tie counts as wrong.
    `accuracy_stderr` is `accuracy_stderr`'s (None for a single pair).
    """
    goods, bads = [g for g, _ in pairs], [b for _, b in pairs]
    lls, _ = sequence_loglikelihoods(
        model, tokenizer, goods + bads, config.window, config.effective_stride, config.batch_size
    )
    margins = [g - b for g, b in zip(lls[: len(pairs)], lls[len(pairs) :])]
    accuracy = sum(m > 0 for m in margins) / len(pairs)
    return {
        "accuracy": accuracy,
        "accuracy_stderr": accuracy_stderr(accuracy, len(pairs)),
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
