"""What preparing a recipe's corpus costs on CPU nodes: core-hours and wall time, beside the GPU-hours.

Preparation (the data, tokenizer and embeddings stages) runs as a CPU job of its own before the
training job (`langadapt launch`), so it is charged in core-hours on CPU nodes and does not hold a
GPU. Its cost grows with the text: every byte is read, cleaned, counted and encoded once. The
estimate is bytes of text x a measured CPU cost per GB, spread over the job's cores; everything
here is pure, `recipe_plan` finds the sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

PREPARATION_CPU_SECONDS_PER_GB = 180.0
"""CPU-seconds (user + sys) per GB (1e9 bytes) of text for the data and tokenizer stages together,
per GB past the first (the tokenizer's merges are bounded by its sample and stop growing):
benchmarks/data_scale.py, the slope from 0.5 to 5 GB with 2 workers on the 2-core dev machine,
measured 2026-11-28 (179.7; at 5 GB the data stage ~33, token-shard encoding ~140 with tiktoken,
reading the corpus for the sample ~22). Update it from that table. The embeddings stage (loading
the base model once, minutes) is not in it."""
BYTES_PER_TOKEN = 4.0
"""UTF-8 bytes per token, to turn a source's token count into bytes when its files are not here:
trained BPE tokenizers average 3-5 bytes per token on their own language (NorMistral's 1.22
tokens per Bokmål word, ~6 bytes a word with its space, is ~4.9; code packs fewer bytes per
token). For recipes/norwegian_warm.yaml it gives 536 GB for its 134B declared tokens."""
GB = 1e9

Basis = Literal["files", "shards", "declared", "unknown"]


@dataclass(frozen=True)
class SourceText:
    """How much text one source holds, and where that number comes from."""

    name: str
    bytes: float | None
    """Bytes of text the data stage reads; None: unknown."""
    basis: Basis
    """files: the local files' uncompressed size; shards: this run's token count x BYTES_PER_TOKEN;
    declared: the recipe's `unique_tokens` x BYTES_PER_TOKEN (after cleaning: the raw text is larger)."""
    streamed: bool = False
    """Read from the Hub while it is prepared (hf_hub): network time comes on top."""


def source_text(name: str, file_bytes: float | None, measured_tokens: float | None,
                declared_tokens: float | None, streamed: bool = False) -> SourceText:
    """The best size known for a source: its files' bytes, else the tokens of this run's shards,
    else the tokens the recipe declares, each token counted as BYTES_PER_TOKEN bytes."""
    if file_bytes is not None:
        return SourceText(name, float(file_bytes), "files", streamed)
    if measured_tokens:
        return SourceText(name, measured_tokens * BYTES_PER_TOKEN, "shards", streamed)
    if declared_tokens:
        return SourceText(name, declared_tokens * BYTES_PER_TOKEN, "declared", streamed)
    return SourceText(name, None, "unknown", streamed)


def preparation_estimate(sources: list[SourceText], cores_per_node: int, nodes: int = 1,
                         time_limit_s: float | None = None,
                         cpu_seconds_per_gb: float = PREPARATION_CPU_SECONDS_PER_GB) -> dict[str, Any]:
    """Core-hours and wall hours of preparing `sources` on `nodes` CPU nodes of `cores_per_node`.

    Wall time assumes every core busy (the data stage's workers, one per core): a lower bound that
    reading from a shared file system or the Hub can stretch. JSON-able: text_gb, core_hours,
    wall_hours, the inputs, per-source sizes, and warnings (sizes unknown, streamed sources, a
    wall time past the time limit)."""
    if cores_per_node < 1 or nodes < 1:
        raise ValueError(f"preparation on {nodes} node(s) x {cores_per_node} cores: both must be at least 1")
    known = [s for s in sources if s.bytes is not None]
    text_gb = sum(s.bytes for s in known) / GB  # type: ignore[misc]
    core_hours = text_gb * cpu_seconds_per_gb / 3600
    wall_hours = core_hours / (cores_per_node * nodes)
    warnings = []
    unknown = [s.name for s in sources if s.bytes is None]
    if unknown:
        warnings.append(f"size of {', '.join(unknown)} unknown (no local files, no unique_tokens): not counted")
    streamed = [s.name for s in sources if s.streamed]
    if streamed:
        warnings.append(f"{', '.join(streamed)} stream from the Hub while prepared: download time not counted")
    limit_hours = None if time_limit_s is None else time_limit_s / 3600
    if limit_hours is not None and wall_hours > limit_hours:
        warnings.append(f"~{wall_hours:,.1f} h of wall time on {nodes} node(s) x {cores_per_node} cores is more than "
                        f"its time limit of {limit_hours:,.1f} h (cluster.preparation.time): raise it")
    return {
        "text_gb": text_gb,
        "cpu_seconds_per_gb": cpu_seconds_per_gb,
        "core_hours": core_hours,
        "nodes": nodes,
        "cores_per_node": cores_per_node,
        "wall_hours": wall_hours,
        "time_limit_hours": limit_hours,
        "sources": [{"name": s.name, "gb": None if s.bytes is None else s.bytes / GB, "basis": s.basis}
                    for s in sources],
        "warnings": warnings,
    }


def _duration(hours: float) -> str:
    """Hours as a person reads them: 48 h, 10.5 min, 3 s (a demo corpus takes seconds)."""
    if hours >= 1:
        return f"{hours:,.1f} h"
    return f"{hours * 60:.1f} min" if hours * 60 >= 1 else f"{hours * 3600:.0f} s"


def render_preparation(prep: dict[str, Any]) -> list[str]:
    """The plan's preparation lines: one row of totals and why it is a second total."""
    bases = sorted({s["basis"] for s in prep["sources"] if s["gb"] is not None})
    limit = "" if prep["time_limit_hours"] is None else f", limit {_duration(prep['time_limit_hours'])}"
    text = f"{prep['text_gb']:,.1f} GB" if prep["text_gb"] >= 1 else f"{prep['text_gb'] * 1e3:.3g} MB"
    return [
        (f"Preparation (data + tokenizer on CPU, {prep['cpu_seconds_per_gb']:g} CPU-s/GB): {text} of text "
         f"({', '.join(bases) or 'none known'}) = {prep['core_hours']:,.3g} core-h, {_duration(prep['wall_hours'])} "
         f"wall on {prep['nodes']} node(s) x {prep['cores_per_node']} cores{limit}"),
        ("Two totals: preparation runs first as a CPU job of its own (core-hours on CPU nodes), "
         "training after it on the GPUs (GPU-hours); no GPU waits on preparation."),
    ]
