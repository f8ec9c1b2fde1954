"""Translation: few-shot, greedy, chrF and BLEU computed as lm-evaluation-harness computes them.

A native task kind rather than an lm-eval `generate_until` YAML because the multilingual suite
runs in every pipeline, the CPU demo and CI included, on the core install, where lm-eval (an
optional extra with a large dependency tree) is absent; and lm-eval would re-index and re-wrap the
model for a few dozen generations. The numbers are the same either way: lm-eval's `bleu` and
`chrf` aggregations are `sacrebleu.corpus_bleu(preds, [refs]).score` and
`sacrebleu.corpus_chrf(preds, [refs]).score` with sacrebleu's defaults (13a tokenisation;
chrF char order 6, word order 0, beta 2), which is what `corpus_scores` calls
(tests/evaluation/test_eval_translation.py checks it against lm-eval's own functions).

The prompt follows lm-eval's WMT tasks: "{source}: {text}\\n{target}:", the reference after one
space, examples separated by a blank line. Greedy decoding stops at the first newline that follows
some text: lm-eval's `until: ["\\n"]` also stops at a newline generated first, which scores an
empty translation, and small models trained on documents whose paragraphs are separated by blank
lines often open with one (the demo's cold model did for every pair). Examples are the file's
first `num_fewshot` rows, the same for every pair and direction, and are never scored.
"""

from __future__ import annotations

import re
from typing import Any

import torch
from transformers import StoppingCriteria

from langadapt.evaluation.bpb import context_length, model_device
from langadapt.evaluation.suite import TranslationTask
from langadapt.evaluation.tasks import left_padded

GENERATION_BATCH = 8
"""Prompts per `generate` call when `evaluation.batch_size` is unset (its CPU default, 1, suits scoring
full windows; generation steps are one token long, so batching them amortises each step's overhead)."""


def corpus_scores(hypotheses: list[str], references: list[str]) -> dict[str, float]:
    """{"chrf", "bleu"} of hypotheses against one reference each, exactly as lm-eval aggregates them."""
    import sacrebleu

    return {
        "chrf": sacrebleu.corpus_chrf(hypotheses, [references]).score,
        "bleu": sacrebleu.corpus_bleu(hypotheses, [references]).score,
    }


def build_prompt(examples: list[dict[str, str]], row: dict[str, str], src: str, tgt: str,
                 names: dict[str, str]) -> str:
    """lm-eval's WMT format: solved examples, then the source waiting for its translation."""
    src_name, tgt_name = names.get(src, src), names.get(tgt, tgt)
    shots = [f"{src_name}: {ex[src]}\n{tgt_name}: {ex[tgt]}" for ex in examples]
    return "\n\n".join([*shots, f"{src_name}: {row[src]}\n{tgt_name}:"])


ANSWER = re.compile(r"\s*(\S[^\n]*)\n")
"""A translation: leading whitespace, then text up to a newline."""


class LineDone(StoppingCriteria):
    """Per row: done once the generated text holds a line with text (the answer) and its newline."""

    def __init__(self, tokenizer: Any, prompt_width: int) -> None:
        self.tokenizer, self.width = tokenizer, prompt_width

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **_: Any) -> torch.Tensor:
        texts = self.tokenizer.batch_decode(input_ids[:, self.width:], skip_special_tokens=True)
        return torch.tensor([ANSWER.match(t) is not None for t in texts], device=input_ids.device)


def answer(text: str) -> str:
    """The first line with text of a continuation, stripped."""
    return text.strip().split("\n", 1)[0].strip()


@torch.inference_mode()
def translate(model: Any, tokenizer: Any, prompts: list[str], max_new_tokens: int, batch_size: int) -> list[str]:
    """Greedy continuations of `prompts`, each cut to its first line with text (`answer`).

    A prompt longer than the model's context keeps its end (lm-eval cuts the same side), leaving
    room for `max_new_tokens`."""
    limit = context_length(model)
    keep = max(1, limit - max_new_tokens) if limit else None
    out: list[str] = []
    for start in range(0, len(prompts), batch_size):
        input_ids, mask, pad = left_padded(tokenizer, prompts[start:start + batch_size], model_device(model), keep)
        generated = model.generate(
            input_ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False,
            pad_token_id=pad, stopping_criteria=[LineDone(tokenizer, input_ids.shape[1])],
        )
        out += [answer(t) for t in tokenizer.batch_decode(generated[:, input_ids.shape[1]:], skip_special_tokens=True)]
    return out


def scored_rows(task: TranslationTask, rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """The rows a model translates: after the `num_fewshot` examples, at most `limit` of them."""
    return rows[task.num_fewshot:][: task.limit]


def copy_source_scores(task: TranslationTask, rows: list[dict[str, str]]) -> dict[str, dict[str, float]]:
    """{direction: {"chrf", "bleu"}} of the source copied unchanged as its own translation.

    The floor the report judges models against: copying needs no model, yet scores well above 0
    (names, numbers, cognates and punctuation are shared; between close languages far more), so a
    chrF at or below it shows no ability to translate, whatever its absolute size."""
    scored = scored_rows(task, rows)
    return {direction: corpus_scores([row[direction.split("-")[0]] for row in scored],
                                     [row[direction.split("-")[1]] for row in scored])
            for direction in task.directions}


def translation_scores(
    model: Any, tokenizer: Any, task: TranslationTask, rows: list[dict[str, str]], batch_size: int | None
) -> tuple[dict[str, dict[str, float | int]], dict[str, list[dict[str, Any]]]]:
    """({direction: {"chrf", "bleu", "pairs"}}, {direction: outputs}) for every direction of `task`
    on this model. The outputs are what lm-eval's `--log_samples` keeps, one per scored row: its
    index among the file's pairs (`doc_id`, examples counted), source, reference, the model's translation and that sentence's chrF
    (to find the few translations worth reading among many)."""
    import sacrebleu

    examples, scored = rows[: task.num_fewshot], scored_rows(task, rows)
    results: dict[str, dict[str, float | int]] = {}
    outputs: dict[str, list[dict[str, Any]]] = {}
    for direction in task.directions:
        src, tgt = direction.split("-")
        prompts = [build_prompt(examples, row, src, tgt, task.names) for row in scored]
        hypotheses = translate(model, tokenizer, prompts, task.max_new_tokens, batch_size or GENERATION_BATCH)
        results[direction] = {**corpus_scores(hypotheses, [row[tgt] for row in scored]), "pairs": len(scored)}
        outputs[direction] = [
            {"doc_id": task.num_fewshot + i, "source": row[src], "reference": row[tgt], "hypothesis": hyp,
             "chrf": sacrebleu.sentence_chrf(hyp, [row[tgt]]).score}
            for i, (row, hyp) in enumerate(zip(scored, hypotheses))
        ]
    return results, outputs
