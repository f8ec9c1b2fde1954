"""Replay as a setting: the share of a training stage's tokens that re-reads the base model's languages.

Continual pretraining on a new language forgets what the base model knew unless some data of the
kind it was trained on is mixed back in ("replay"). The anchors for how much: Ibrahim et al. 2024
("Simple and Scalable Strategies to Continually Pre-train Large Language Models") found 1-5% replay
enough for small distribution shifts and up to ~25% for large ones such as a new language; Poro 2
(Llama-3.1-8B continued on Finnish) replayed 30% English, 30% code and 10% math and lost 1.1 points
of English.

A recipe states that share instead of hand-balancing source weights: `data.replay` for every
training stage, `stage1.replay` / `stage2.replay` for one. This mirrors the mixture itself (the
data section's weights are the default, a stage's `mixture` overrides them), and for the same
reason stage 2 does not inherit `stage1.replay` the way it inherits batch or optimizer keys: the
share belongs to the stage's mixture, and a short stage 1 often streams shares where stage 2 streams
epochs (recipes/normistral_11b_warm.yaml), which a replay share cannot be combined with. `replay_mixture` turns it into the per-source weights the
stream already understands, so the stream, the epoch planner (`data.epochs`), the preflight check
and `langadapt plan` all see ordinary weights; `stage_mixture` is the one call they make.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from langadapt.errors import LangadaptError
from langadapt.recipe.data import DataConfig, stream_mixture

REPLAY_ROLE = "replay"
"""The `data.sources[].role` whose sources make up the replay share (a code source counted as
replay, as Poro 2 did, is a `role: replay` source with `lang: code`)."""


class StageMixtureSettings(Protocol):
    """What a training stage says about its mixture (`TrainStageConfig` has both fields)."""

    mixture: Mapping[str, Any] | None
    replay: float | None


def replay_mixture(entries: Mapping[str, Mapping[str, Any]], roles: Mapping[str, str], share: float,
                   key: str = "replay") -> dict[str, dict[str, Any]]:
    """`entries` (`stream_mixture`'s output) re-weighted so `share` of the tokens come from replay sources.

    The `role: replay` sources with weight > 0 get `share` of the weight, split among them by their
    own weights; the other sources with weight > 0 (target, code) get `1 - share`, split the same
    way; weight-0 sources (evaluation-only neighbours) stay at 0. The result sums to 1, so with no
    `max_epochs` cap in play each source's token share is exactly its weight.

    Refused (LangadaptError naming `key`) where the share cannot be honoured: a source whose tokens
    do not follow a weight (`epochs`, or an override with neither weight nor epochs: its tokens
    follow its size, which this pure function cannot know), no replay source with weight > 0 for a
    share above 0, or nothing but replay left to train on. A `max_epochs` cap is kept: a capped
    source hands its excess to the others, and `langadapt plan` shows the share that results.
    """
    if not 0 <= share < 1:
        raise LangadaptError.at(key, f"{share:g} is not a share of the stage's tokens in [0, 1)")
    for name, entry in entries.items():
        if entry.get("weight") is None:
            how = "sets epochs" if entry.get("epochs") is not None else "has neither weight nor epochs"
            raise LangadaptError.at(key, f"source {name} {how}, so its tokens do not follow a share; give it a "
                                     f"weight (data.sources or the stage's mixture) or leave {key} unset")
    replay = {n: float(e["weight"]) for n, e in entries.items() if roles[n] == REPLAY_ROLE and e["weight"] > 0}
    rest = {n: float(e["weight"]) for n, e in entries.items() if roles[n] != REPLAY_ROLE and e["weight"] > 0}
    if share > 0 and not replay:
        raise LangadaptError.at(key, f"{share:g} of the tokens should be replay, but no role: replay source has "
                                 "weight > 0; add one (or set weight > 0 on one) or leave it unset")
    if not rest:
        raise LangadaptError.at(key, "no target or code source has weight > 0, so nothing is left for the other "
                                 f"{1 - share:g} of the tokens")
    mixed = {name: dict(entry) for name, entry in entries.items()}
    for group, part in ((replay, share), (rest, 1.0 - share)):
        total = sum(group.values())
        for name, weight in group.items():
            mixed[name]["weight"] = part * weight / total
    return mixed


def stage_replay(data: DataConfig, stage_name: str, stage: StageMixtureSettings) -> tuple[float | None, str]:
    """The replay share in force for a stage and the recipe key that set it: the stage's own, else
    `data.replay` (None: the weights as written)."""
    if stage.replay is not None:
        return stage.replay, f"{stage_name}.replay"
    return data.replay, "data.replay"


def stage_mixture(data: DataConfig, stage_name: str, stage: StageMixtureSettings) -> dict[str, dict[str, Any]]:
    """The mixture training stage `stage_name` streams: the data weights, the stage's `mixture`
    overrides, then its replay share. Training, `langadapt plan` and the preflight check all call
    this, so what is planned is what is trained."""
    entries = stream_mixture(data, stage.mixture)
    share, key = stage_replay(data, stage_name, stage)
    if share is None:
        return entries
    return replay_mixture(entries, {s.name: s.role for s in data.sources}, share, key)
