"""The checks an exported folder passes before it is marked complete or pushed.

1. It loads with plain transformers (`AutoModelForCausalLM`, `AutoTokenizer`, nothing of ours).
2. Its tokenizer encodes the prompt to the same ids as the run's tokenizer.
3. Its logits on fixed inputs match the run's model: the prompt, and a sequence that walks the
   whole vocabulary (a swapped or mis-cast embedding row shows up there). The tolerance depends
   on the export dtype: float32 must be exact to rounding, bf16/fp16 may differ by their cast.
4. It generates from a prompt in the target language.

The reference logits are computed before the weights are cast and saved, and the run's model is
released before the folder is loaded: one model in memory at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from langadapt.errors import LangadaptError

TOLERANCE = {"float32": (1e-5, 0.0), "float16": (1e-2, 1e-2), "bfloat16": (5e-2, 5e-2)}
"""Export dtype -> (absolute, relative to the largest reference logit) bound on the logit difference.
A float32 export is the trained weights bit for bit; half precision keeps 11 (fp16) or 8 (bf16)
significant bits per weight, and the rounding adds up over the layers."""
PROBE_LENGTH = 64
"""Tokens of the vocabulary-walking probe (bounded by the model's context length)."""
DEFAULT_PROMPTS = {
    "nb": "Norge er et land som", "nn": "Noreg er eit land som", "no": "Norge er et land som",
    "da": "Danmark er et land, der", "sv": "Sverige är ett land som", "is": "Ísland er land sem",
    "fo": "Føroyar eru eitt land, sum", "fi": "Suomi on maa, joka", "se": "Sápmi lea guovlu mii",
    "en": "The capital of England is", "de": "Deutschland ist ein Land, das", "fr": "La France est un pays qui",
    "es": "España es un país que", "nl": "Nederland is een land dat", "it": "L'Italia è un paese che",
    "pt": "Portugal é um país que", "pl": "Polska jest krajem, który", "et": "Eesti on riik, mis",
}
"""A neutral sentence start per language for the smoke generation (`export.prompt` overrides)."""


def default_prompt(prompt: str | None, languages: list[str]) -> str:
    """`export.prompt`, else the default of the first language that has one."""
    if prompt:
        return prompt
    for lang in languages:
        if lang in DEFAULT_PROMPTS:
            return DEFAULT_PROMPTS[lang]
    raise LangadaptError(f"export.prompt: no default prompt for language(s) {', '.join(languages) or '(none)'}; "
                         "set export.prompt to a sentence start in the target language")


@dataclass(frozen=True)
class Probe:
    """Fixed inputs and the run model's logits on them."""

    prompt: str
    prompt_ids: list[int]
    inputs: list[torch.Tensor]
    logits: list[torch.Tensor]


def probe(model: torch.nn.Module, tokenizer_folder: Path, prompt: str) -> Probe:
    """The run model's logits (`model` in float32, eval mode) on the prompt and on a walk through
    the vocabulary."""
    from transformers import AutoTokenizer

    from langadapt.export.folder import context_length

    ids = AutoTokenizer.from_pretrained(tokenizer_folder)(prompt)["input_ids"]
    vocab = model.get_input_embeddings().weight.shape[0]
    length = min(PROBE_LENGTH, context_length(model.config) or PROBE_LENGTH, vocab)
    walk = torch.linspace(0, vocab - 1, length).round().long()
    inputs = [torch.tensor([ids]), walk[None]]
    with torch.no_grad():
        logits = [model(x).logits.float() for x in inputs]
    return Probe(prompt, ids, inputs, logits)


def verify_folder(folder: Path, reference: Probe, dtype: str, max_new_tokens: int = 20) -> dict[str, object]:
    """Run the checks on an exported folder; raise one clear line on the first that fails."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    except Exception as exc:  # noqa: BLE001 - whatever transformers raises, the folder is not usable as is
        raise LangadaptError(f"{folder}: does not load with AutoModelForCausalLM/AutoTokenizer "
                             f"({type(exc).__name__}: {exc})") from None
    ids = tokenizer(reference.prompt)["input_ids"]
    if ids != reference.prompt_ids:
        raise LangadaptError(f"{folder}: the exported tokenizer encodes {reference.prompt!r} as {ids[:8]}..., "
                             f"the run's as {reference.prompt_ids[:8]}...")
    with torch.no_grad():
        diffs = [(model(x).logits.float() - want).abs().max().item() for x, want in zip(reference.inputs, reference.logits)]
    max_diff = max(diffs)
    atol, rtol = TOLERANCE[dtype]
    bound = atol + rtol * max(want.abs().max().item() for want in reference.logits)
    if not max_diff <= bound:  # also catches NaN
        raise LangadaptError(f"{folder}: logits differ from the run's model by {max_diff:.3g} "
                             f"(allowed for {dtype}: {bound:.3g})")
    inputs = tokenizer(reference.prompt, return_tensors="pt")
    with torch.no_grad():
        output = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False,
                                pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None
                                else tokenizer.eos_token_id)
    sample = tokenizer.decode(output[0], skip_special_tokens=True)
    return {"max_abs_logit_diff": max_diff, "allowed": bound, "prompt": reference.prompt, "sample": sample}
