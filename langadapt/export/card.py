"""The model card: Hub metadata from huggingface_hub's ModelCardData, body from the run's own files.

Numbers in the card are read from the run directory (the evaluate stage's results.json, the
training stages' manifests), never typed in, so the card cannot claim more than the run measured.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from huggingface_hub import ModelCard, ModelCardData

from langadapt.rundir import TRAINING_STAGES, RunLayout


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def results_table(results: dict[str, Any]) -> str:
    """Bits-per-byte per language for every evaluated model (lower is better)."""
    models = results.get("models", {})
    langs = sorted({lang for per_lang in models.values() for lang in per_lang})
    if not langs:
        return "No evaluation results were recorded for this run.\n"
    lines = ["| model | " + " | ".join(langs) + " |", "|---" * (len(langs) + 1) + "|"]
    for name, per_lang in models.items():
        cells = [f"{per_lang[lang]['bits_per_byte']:.3f}" if lang in per_lang else "" for lang in langs]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def training_summary(layout: RunLayout) -> str:
    """One line per training stage from its manifest (steps, tokens, final loss)."""
    lines = []
    for stage in TRAINING_STAGES:
        summary = _read_json(layout.manifest(stage)).get("summary", {})
        if summary:
            shown = {k: summary[k] for k in ("steps", "tokens", "final_loss", "trainable_params") if k in summary}
            lines.append(f"- **{stage}**: " + ", ".join(f"{k} = {v}" for k, v in shown.items()))
    return "\n".join(lines) or "- (no training stage recorded)"


def build_card(layout: RunLayout, base_model: str | None, languages: list[str], license: str,
               description: str) -> ModelCard:
    data = ModelCardData(language=languages or None, license=license, library_name="transformers",
                         base_model=base_model if base_model and "/" in base_model and not Path(base_model).exists() else None,
                         tags=["langadapt", "continual-pretraining", "vocabulary-transfer"])
    results = _read_json(layout.evaluation_results)
    body = f"""
# {layout.root.name}

{description or "A language-adapted causal language model produced with langadapt."}

Adapted from `{base_model or "a randomly initialised model (init: scratch)"}` for {", ".join(languages) or "the target language"}:
a new tokenizer trained on the target language, embeddings (input and output) transferred to it,
stage 1 trained the embeddings with the body frozen, stage 2 continued pretraining of everything.

## Evaluation (held-out bits per byte, lower is better)

{results_table(results)}
## Training

{training_summary(layout)}

The resolved recipe of this run is in `langadapt_recipe.yaml`.
"""
    return ModelCard(f"---\n{data.to_yaml()}\n---\n{body}")
