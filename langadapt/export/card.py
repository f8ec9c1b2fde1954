"""The model card: Hub metadata from huggingface_hub's ModelCardData, body from the run's own files.

Every statement is generated from what ran: the stages whose manifests are complete, the init
(a scratch model's card says nothing about a base or a vocabulary transfer), the tokens each
source contributed (the training checkpoints' data-stream counters), the tokenizer's fertility
(tokenizer/metrics.json), the evaluation (evaluate/results.json), the hardware and wall time the
manifests recorded. The card cannot claim more than the run measured.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from langadapt.data.shards import read_shard
from langadapt.export.provenance import RunFacts, trained_sources
from langadapt.recipe.export import ExportConfig
from langadapt.run.layout import TRAINER_STATE, TRAINING_STAGES, RunLayout, latest_checkpoint, read_manifest
from langadapt.tokenizer.summary import vocabulary_shortfall

STAGE_TEXT = {
    "stage1": "**Stage 1** trained only the input embeddings and the LM head, with the transformer body frozen",
    "stage2": "**Stage 2** trained every parameter",
}


def read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


@dataclass(frozen=True)
class Exported:
    """Which model the card describes."""

    name: str
    """Its name in evaluate/results.json (adapted, stage1), or a checkpoint's (stage2-step50)."""
    training_stages: tuple[str, ...]
    """The training stages this run completed, in order."""
    verification: dict[str, Any]
    """What `verify.verify_folder` measured (max logit difference, prompt, sample)."""
    dropped_vocabulary_files: Mapping[str, str] = field(default_factory=dict)
    """The base's vocabulary files the folder leaves out, and why (`export.vocabulary`)."""
    folder: str = "model"
    """The exported folder's name, which the card's "How to use" loads when `export.repo_id` is unset."""


def trained_tokens(layout: RunLayout, stage: str) -> dict[str, int]:
    """Tokens each source contributed to a training stage, from its last checkpoint's stream state
    (the final step is always checkpointed: `Checkpointer.due`)."""
    last = latest_checkpoint(layout.trained(stage).checkpoints)
    stream = read_json(last / TRAINER_STATE).get("stream", {}) if last else {}
    return {name: int(count) * int(stream.get("seq_len", 0)) for name, count in stream.get("counts", {}).items()}


def metadata(layout: RunLayout, facts: RunFacts, config: ExportConfig, exported: Exported,
             trained: list[str]) -> ModelCardData:
    results = read_json(layout.evaluation_results).get("models", {}).get(exported.name, {})
    model_name = layout.root.name
    evals = [EvalResult(task_type="text-generation", task_name="Language modelling", dataset_type="held-out",
                        dataset_name=f"{lang} held-out text", dataset_config=lang, dataset_split="validation",
                        metric_type="bits_per_byte", metric_name="bits per byte (lower is better)",
                        metric_value=round(scores["bits_per_byte"], 4))
             for lang, scores in sorted(results.items()) if "bits_per_byte" in scores]
    datasets = list(dict.fromkeys(hub_id for s in facts.sources if s.name in trained for hub_id in s.hub_ids))
    tags = ["langadapt", "continual-pretraining"] + (["vocabulary-transfer"] if facts.init == "warm" else ["from-scratch"])
    return ModelCardData(
        model_name=model_name, language=list(config.languages or facts.target_languages) or None,
        license=config.license, library_name="transformers", pipeline_tag="text-generation", tags=tags,
        base_model=facts.base_hub_id, base_model_relation="finetune" if facts.base_hub_id else None,
        datasets=datasets or None, eval_results=evals or None)


def vocabulary_text(tokenizer: dict, embeddings: dict) -> str:
    """How the run's vocabulary relates to the base's, in the words of the three roads (keep, extend, replace)."""
    vocab, kind, method = tokenizer.get("vocab_size", "?"), tokenizer.get("kind", "?"), embeddings.get("method", "?")
    if kind == "keep_base":
        return f"keeping its own {vocab}-token tokenizer (`keep_base`): every embedding row is the base's."
    if kind == "extend":
        base = tokenizer.get("base_vocab_size")
        added = (f"{vocab - base:,} new tokens learned on the target language appended to the base's {base:,}"
                 if isinstance(base, int) and isinstance(vocab, int) else "the new tokens appended")
        return (f"with its tokenizer extended to {vocab} tokens (`extend`: BPE training continued on the target "
                f"language, every base token and merge kept at its id and rank, {added}); the base's "
                f"embedding and LM-head rows are kept, the new tokens' rows were initialised with `{method}`.")
    return (f"with a new {vocab}-token tokenizer (`{kind}`) trained on the target language; its input embeddings "
            f"and LM head were initialised for the new vocabulary with the `{method}` embedding transfer method.")


def usage_text(config: ExportConfig, exported: Exported) -> str:
    """A snippet that loads the export with plain transformers and generates from the prompt the
    export was checked with: where it will live (`export.repo_id`), else the folder as written."""
    where = json.dumps(config.repo_id or exported.folder, ensure_ascii=False)
    prompt = json.dumps(exported.verification.get("prompt") or config.prompt or "", ensure_ascii=False)
    return f"""```python
from transformers import AutoModelForCausalLM, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained({where})
model = AutoModelForCausalLM.from_pretrained({where})
inputs = tokenizer({prompt}, return_tensors="pt")
output = model.generate(**inputs, max_new_tokens=50, do_sample=True, top_p=0.9)
print(tokenizer.decode(output[0], skip_special_tokens=True))
```

The tokenizer pads on the right, as training and fine-tuning collators expect; for batched generation
set `tokenizer.padding_side = "left"` first, so that every prompt ends where generation starts."""


def origin_text(layout: RunLayout, facts: RunFacts, exported: Exported) -> str:
    tokenizer = layout.stage_summary("tokenizer")
    embeddings = layout.stage_summary("embeddings")
    vocab = tokenizer.get("vocab_size", "?")
    if facts.init == "scratch":
        lines = [(f"Trained from scratch (`init: scratch`): a randomly initialised model with "
                  f"{embeddings.get('parameters', 0):,} parameters and a {vocab}-token tokenizer trained on the run's data.")]
    else:
        base = (f"[`{facts.base_hub_id}`](https://huggingface.co/{facts.base_hub_id})" if facts.base_hub_id
                else f"the local model `{facts.base_label}`")
        lines = [f"Adapted from {base} {vocabulary_text(tokenizer, embeddings)}"]
    rows = embeddings.get("rows")
    if isinstance(rows, int) and isinstance(vocab, int) and rows > vocab:
        lines.append(f"The embedding matrix and LM head have {rows:,} rows: the {rows - vocab:,} after the "
                     f"tokenizer's {vocab:,} ids are padding (a multiple for GPU kernels) that no text encodes to.")
    if shortfall := vocabulary_shortfall(tokenizer):
        lines.append(f"Note: {shortfall}.")
    for stage in exported.training_stages:
        summary = layout.stage_summary(stage)
        final = summary.get("final_loss")
        final_text = f"{final:.3f}" if isinstance(final, (int, float)) else "n/a"
        lines.append(f"{STAGE_TEXT[stage]}: {summary.get('steps', '?')} steps, {summary.get('tokens', 0):,} tokens, "
                     f"final training loss {final_text} (the mean of the last logged steps: the loss curve's "
                     "last point).")
    return "\n".join(lines)


EVALUATION_ONLY = "evaluation only"
"""The role the card gives a source no training stage read (weight 0 in the recipe: a neighbour
language kept for its held-out text, which the evaluation scores)."""


def data_table(layout: RunLayout, facts: RunFacts, tokens: dict[str, dict[str, int]]) -> str:
    """A row per source: its tokens per training stage and passes; evaluation-only sources say so
    instead of posing as replay with 0 tokens."""
    stages = [s for s in TRAINING_STAGES if s in tokens]
    trained = trained_sources(facts, tokens)
    head = ["source", "language", "role", "unique tokens", *[f"{s} tokens" for s in stages], "epochs", "licence"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for source in facts.sources:
        shard = layout.tokenizer.tokens / source.name
        unique = read_shard(shard).num_tokens if shard.is_dir() else 0
        used = [tokens[s].get(source.name, 0) for s in stages]
        taught = source.name in trained
        epochs = f"{sum(used) / unique:.2f}" if unique and taught else "-"
        name = ", ".join(f"[{h}](https://huggingface.co/datasets/{h})" for h in source.hub_ids) or source.name
        cells = [name, source.lang, source.role if taught else EVALUATION_ONLY, f"{unique:,}",
                 *[f"{n:,}" if taught else "-" for n in used], epochs, "; ".join(source.licences) or "not recorded"]
        lines.append("| " + " | ".join(cells) + " |")
    if len(trained) < len(facts.sources):
        lines += ["", (f"Sources marked *{EVALUATION_ONLY}* contributed no training tokens; their held-out text "
                       "is scored by the evaluation (what the model gained or forgot in those languages).")]
    return "\n".join(lines)


def fertility_table(layout: RunLayout, results: dict[str, Any]) -> str:
    """Tokens per word and bytes per token per language and tokenizer: the numbers the evaluation
    report shows (results.json), so card and report print one figure per fact; the tokenizer stage's
    own measurement (tokenizer/metrics.json) only when the run was not evaluated. The two differ
    because the evaluation scores at most `evaluation.max_bytes_per_lang` of each language's
    held-out text, the tokenizer stage all of it."""
    measured = ((results.get("tokenizers") or {}).get("metrics") or {}).get("tokenizers")
    where = "on the held-out text the evaluation scored"
    if not measured:
        measured = read_json(layout.tokenizer.metrics).get("tokenizers", {})
        where = "on the run's held-out text"
    rows = [(lang, name, m) for name, per_lang in measured.items() for lang, m in sorted(per_lang.items())
            if "fertility" in m and "bytes_per_token" in m]
    if not rows:
        return "No tokenizer metrics were recorded."
    lines = [f"Measured {where}.", "", "| language | tokenizer | tokens per word | bytes per token |", "|---|---|---|---|"]
    lines += [f"| {lang} | {name} | {m['fertility']:.2f} | {m['bytes_per_token']:.2f} |" for lang, name, m in rows]
    return "\n".join(lines)


def dropped_files_text(dropped: Mapping[str, str]) -> str:
    """One sentence per base vocabulary file a user may look for and not find (empty: none left out)."""
    return "".join(f"\n\nThe base model's `{name}` is not included: {why}; `tokenizer.json` is this "
                   "model's tokenizer." for name, why in dropped.items())


def results_table(results: dict[str, Any]) -> str:
    """Bits-per-byte per language for every evaluated model (lower is better)."""
    models = results.get("models", {})
    langs = sorted({lang for per_lang in models.values() for lang in per_lang})
    if not langs:
        return "No evaluation results were recorded for this run."
    lines = ["| model | " + " | ".join(langs) + " |", "|---" * (len(langs) + 1) + "|"]
    for name, per_lang in models.items():
        cells = [f"{per_lang[lang]['bits_per_byte']:.3f}" if "bits_per_byte" in per_lang.get(lang, {}) else ""
                 for lang in langs]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def tradeoff_text(results: dict[str, Any], model: str) -> str:
    """The card's first table: the target's gain and the largest forgetting of `model`, as the
    evaluation computed them (results.json's `tradeoff`; export does not recompute evaluation)."""
    found = (results.get("tradeoff") or {}).get(model)
    if not found:
        return f"This model ({model}) has no gain-and-forgetting summary in the run's evaluation."
    header, rows = found["table"]["header"], found["table"]["rows"]
    lines = [f"**{found['headline']}**", "", "| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def held_out_text(results: dict[str, Any], facts: RunFacts) -> str:
    meta, langs = results.get("meta", {}), results.get("langs", {})
    per_source = "; ".join(f"{s.name} ({s.lang}): {s.held_out}" for s in facts.sources)
    counted = ", ".join(f"{lang} {info.get('bytes', 0):,} bytes" for lang, info in sorted(langs.items()))
    return (f"Held-out text: documents the data stage set aside before training and never trained on "
            f"({per_source}). Scored: {counted or 'nothing'} (at most {meta.get('max_bytes_per_lang', '?')} bytes "
            f"per language, windows of {meta.get('window', '?')} tokens). Bits per byte = negative log-likelihood "
            "summed over the text / its UTF-8 bytes / ln 2: comparable across tokenizers.")


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def compute_text(layout: RunLayout, stages: tuple[str, ...]) -> str:
    lines = []
    for stage in stages:
        manifest = read_manifest(layout.stage_dir(stage))
        s = manifest.get("summary", {})
        energy = f", {s['energy_kwh']:.2f} kWh" if "energy_kwh" in s else ""
        lines.append(f"- {stage}: {s.get('world_size', 1)} process(es), {s.get('engine', '?')} engine "
                     f"(ZeRO {s.get('zero_stage', 0)}), {s.get('precision', '?')}, "
                     f"{duration(manifest.get('wall_seconds', 0))} wall time{energy}; "
                     f"torch {manifest.get('versions', {}).get('torch', '?')}")
    return "\n".join(lines) or "- no training stage recorded"


def build_card(layout: RunLayout, facts: RunFacts, config: ExportConfig, exported: Exported) -> ModelCard:
    """The card of an exported folder (validated by `ModelCard` when it is written)."""
    tokens = {stage: trained_tokens(layout, stage) for stage in exported.training_stages}
    results = read_json(layout.evaluation_results)
    langs = ", ".join(config.languages or facts.target_languages) or "the target language"
    check = exported.verification
    body = f"""
# {layout.root.name}{"" if exported.name in ("adapted", "stage1") else f" ({exported.name})"}

{config.description or "A language-adapted causal language model produced with langadapt."}

## How to use

{usage_text(config, exported)}

## Gain and forgetting (relative change of held-out bits per byte, lower is better)

{tradeoff_text(results, exported.name)}

## How it was made

{origin_text(layout, facts, exported)}

## Training data

{data_table(layout, facts, tokens)}

Epochs are passes over a source's unique tokens, summed over the training stages.

## Tokenizer

{fertility_table(layout, results)}{dropped_files_text(exported.dropped_vocabulary_files)}

## Evaluation (bits per byte on held-out text, lower is better)

{results_table(results)}

{held_out_text(results, facts)}{"" if exported.name in results.get("models", {}) else
    f" The scores above are the run's models; this folder ({exported.name}) was not evaluated."}

## Compute

{compute_text(layout, exported.training_stages)}

## Checks before publishing

This folder was reloaded with `AutoModelForCausalLM` and `AutoTokenizer` alone: its logits differ
from the run's model by at most {check.get("max_abs_logit_diff", float("nan")):.2g}, and it generates
from the prompt `{check.get("prompt", "")}`.

## Intended use and limitations

A base model for {langs}, meant for research and for further fine-tuning. It is not instruction-tuned
and has had no safety training: it continues text, and it reproduces the biases, errors and gaps of
its training data. The evaluation above measures language modelling on held-out text only, not
factual accuracy or downstream tasks. Check the licences of the training data (above) before use.

## Reproducing

`langadapt_recipe.yaml` is the resolved recipe of this run (local paths replaced by `<local>/NAME`):
`langadapt run langadapt_recipe.yaml` with the same data repeats it.
"""
    # ModelCard parses the YAML front matter into ModelCardData: malformed metadata fails here.
    return ModelCard(f"---\n{metadata(layout, facts, config, exported, trained_sources(facts, tokens)).to_yaml()}\n---\n{body}")
