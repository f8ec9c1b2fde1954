"""The one trade-off every adaptation makes: what the target language gained, what the rest forgot.

A report that lists eight languages side by side leaves the reader to find the two numbers that
decide whether a run is worth keeping; here they are computed once, from the results dict, and
every report, model card and frontier leads with them:

    target nb: -63.1% bpb vs base; largest forgetting: en +21.6%

Sign convention (both sides): the relative change of bits per byte against the reference model
(`results["reference"]`, the base model in a run), negative = better. The target side is the
target language that gained least (with several targets, the claim "every target gained at least
this much" holds); the forgetting side is the language among the others (source language,
replay, neighbours, code) whose bits per byte rose most. Both are worst cases on purpose: a mean
would let one strong language hide a collapse of another.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from langadapt.evaluation.tables import headline_model, ordered_langs


@dataclass(frozen=True)
class Tradeoff:
    """One model's gain and forgetting against the reference."""

    model: str
    reference: str
    changes: dict[str, float]
    """Every scored language -> relative bpb change vs the reference (negative = better)."""
    target_langs: tuple[str, ...]
    target_lang: str
    """The target language that gained least."""
    target_change: float
    """Its relative bpb change (negative = the model got better at it)."""
    forgetting_lang: str | None
    """The non-target language whose bpb rose most; None when only targets were scored."""
    forgetting: float | None
    """Its relative bpb change (positive = forgotten; negative = even the worst one improved)."""

    @property
    def gain(self) -> float:
        """The target gain as a positive number when the model improved (-target_change)."""
        return -self.target_change

    @property
    def forgot(self) -> bool:
        """Whether any other language got worse (its bpb rose). When none did, the worst other
        language is still the forgetting side's number (the least gain), but it is no forgetting
        and is never called one (issue 38: "largest forgetting: code -1.0%" read as a loss)."""
        return self.forgetting is not None and self.forgetting > 0

    @property
    def forgetting_label(self) -> str:
        """What the forgetting side's number is: `largest forgetting`, or `no forgetting (least gain)`."""
        return "largest forgetting" if self.forgetting is None or self.forgot else "no forgetting (least gain)"

    def headline(self) -> str:
        """`target nb: -63.1% bpb vs base; largest forgetting: en +21.6%` (`no forgetting: no other
        language got worse (least gain: code -1.0%)` when every other language held or improved)."""
        several = f" (least gain of {', '.join(self.target_langs)})" if len(self.target_langs) > 1 else ""
        line = f"target {self.target_lang}{several}: {self.target_change:+.1%} bpb vs {self.reference}"
        if self.forgetting_lang is None:
            return f"{line}; largest forgetting: no other language scored"
        if not self.forgot:
            return (f"{line}; no forgetting: no other language got worse "
                    f"(least gain: {self.forgetting_lang} {self.forgetting:+.1%})")
        return f"{line}; largest forgetting: {self.forgetting_lang} {self.forgetting:+.1%}"

    def table(self) -> tuple[list[str], list[list[str]]]:
        """The leading table of a report or card: one row per side."""
        header = [f"{self.model} vs {self.reference}", "language", "bits per byte vs reference"]
        rows = [["target gain", self.target_lang, f"{self.target_change:+.1%}"]]
        rows.append([self.forgetting_label, self.forgetting_lang or "–",
                     "–" if self.forgetting is None else f"{self.forgetting:+.1%}"])
        return header, rows

    def as_dict(self) -> dict:
        """What results.json keeps (the model card reads it there: export does not import evaluation)."""
        header, rows = self.table()
        return {**asdict(self), "target_langs": list(self.target_langs), "gain": self.gain,
                "headline": self.headline(), "table": {"header": header, "rows": rows}}


def target_langs(results: dict) -> list[str]:
    """The run's target languages (`results["target_langs"]`, from the data stage's roles), else the
    first language in suite order (the monolingual suite comes first by convention)."""
    given = [lang for lang in results.get("target_langs") or [] if lang]
    if given:
        return given
    langs = ordered_langs(results)
    return langs[:1]


def tradeoff(results: dict, model: str | None = None, targets: Sequence[str] | None = None) -> Tradeoff | None:
    """`model`'s (default: the report's headline model) gain and largest forgetting vs the reference.

    None when there is nothing to compare: no reference, the model is the reference, or no target
    language was scored for both."""
    reference, model = results.get("reference"), model or headline_model(results)
    if reference is None or model is None or model == reference:
        return None
    ref, own = results["models"].get(reference, {}), results["models"].get(model, {})
    changes = {lang: own[lang]["bits_per_byte"] / ref[lang]["bits_per_byte"] - 1
               for lang in ordered_langs(results)
               if "bits_per_byte" in own.get(lang, {}) and ref.get(lang, {}).get("bits_per_byte")}
    wanted = list(targets) if targets is not None else target_langs(results)
    scored_targets = [lang for lang in wanted if lang in changes]
    if not scored_targets:
        return None
    worst_target = max(scored_targets, key=lambda lang: changes[lang])
    others = [lang for lang in changes if lang not in wanted]
    forgotten = max(others, key=lambda lang: changes[lang]) if others else None
    return Tradeoff(model=model, reference=reference, changes=changes, target_langs=tuple(scored_targets),
                    target_lang=worst_target, target_change=changes[worst_target], forgetting_lang=forgotten,
                    forgetting=None if forgotten is None else changes[forgotten])


STEP0_MODEL = "init"
"""The run's model at step 0 (new tokenizer, initialised rows, no training): `evaluation.stage`'s name."""


def forgetting_origin(results: dict, found: Tradeoff) -> str | None:
    """How much of the largest forgetting the tokenizer change cost before any training (the step-0
    model against the reference) and how much training then forgot or won back, in words: the two
    have different cures (the head rows and the tokenizer; replay and the learning rate).
    None without a step-0 model or a forgetting side."""
    lang, init = found.forgetting_lang, results["models"].get(STEP0_MODEL, {})
    ref = results["models"].get(found.reference, {})
    if lang is None or found.forgetting is None or found.model == STEP0_MODEL \
            or "bits_per_byte" not in init.get(lang, {}) or not ref.get(lang, {}).get("bits_per_byte"):
        return None
    at_start = init[lang]["bits_per_byte"] / ref[lang]["bits_per_byte"] - 1
    moved = (found.forgetting - at_start) * 100
    then = f"training forgot {moved:.1f} points more" if moved > 0 else f"training won back {-moved:.1f} points"
    return (f"{lang} vs {found.reference}: {at_start:+.1%} at step 0 (the tokenizer change and the new rows, before any "
            f"training: the {STEP0_MODEL} model), {found.forgetting:+.1%} for {found.model}: {then}.")


def tradeoffs(results: dict) -> dict[str, dict]:
    """`Tradeoff.as_dict` of every model but the reference (results.json's `tradeoff`)."""
    found = {name: tradeoff(results, name) for name in results["models"]}
    return {name: t.as_dict() for name, t in found.items() if t is not None}


def pareto(points: Sequence[tuple[float, float]]) -> list[bool]:
    """For each (forgetting, gain) point: is it on the Pareto front (less forgetting, more gain)?

    A point is dominated when another forgets no more and gains no less, and is strictly better in
    one of the two; equal points are both kept (neither is better)."""
    def dominated(p: tuple[float, float]) -> bool:
        return any(q[0] <= p[0] and q[1] >= p[1] and (q[0] < p[0] or q[1] > p[1]) for q in points)

    return [not dominated(p) for p in points]
