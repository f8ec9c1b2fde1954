"""Planning: read and check every suite's data before the first model is loaded.

A typo in a suite, a missing file or a malformed minimal-pairs line should cost seconds, not the
hour it takes to score a 7B model before reaching the broken task.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langadapt.errors import LangadaptError
from langadapt.evaluation.lm_eval_bridge import prepare_lm_eval
from langadapt.evaluation.suite import (
    BpbTask,
    GenerateTask,
    LmEvalTask,
    MinimalPairsTask,
    Suite,
    TokenizerMetricsTask,
    TranslationTask,
    unmeasured,
)
from langadapt.evaluation.task_data import cap_bytes, read_minimal_pairs, read_texts, read_translation
from langadapt.recipe.evaluation import EvaluationConfig

log = logging.getLogger("langadapt")

RUN_DATA = "run data (valid)"
"""Where held-out text comes from unless the user gave a file for its language."""


@dataclass
class Plan:
    """Everything the suites need, read and checked before any model is loaded."""

    texts: dict[str, list[str]] = field(default_factory=dict)
    """Held-out documents per language (capped), shared by bpb and tokenizer metrics."""
    sources: dict[str, str] = field(default_factory=dict)
    """Where each language's text came from (run data or files)."""
    tokenizer_langs: list[str] = field(default_factory=list)
    """Languages for tokenizer metrics."""
    pairs: dict[str, tuple[MinimalPairsTask, list[tuple[str, str]]]] = field(default_factory=dict)
    """Minimal-pair tasks by key, with their pairs."""
    lm_eval: dict[str, tuple[LmEvalTask, Any]] = field(default_factory=dict)
    """lm-eval tasks by key, with lm-eval's task index for each (built once, datasets checked)."""
    translation: dict[str, tuple[TranslationTask, list[dict[str, str]]]] = field(default_factory=dict)
    """Translation tasks by key, with their parallel rows."""
    prompts: dict[str, list[str]] = field(default_factory=dict)
    """Generation prompts per language (all generate tasks merged)."""
    suites: dict[str, dict] = field(default_factory=dict)
    """Per suite: source, description, languages, task keys (for the report)."""
    given: list[str] = field(default_factory=list)
    """Languages whose text the user gave (`langadapt eval --texts`): scored even where no suite's
    bpb task names them."""
    notes: list[str] = field(default_factory=list)
    """What was skipped and why."""
    given_sizes: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Language -> (documents, UTF-8 bytes) before `evaluation.max_bytes_per_lang` cut it; only the
    languages the cap cut (`capped`), so results.json says what was scored of how much."""

    def capped(self, lang: str, texts: list[str], max_bytes: int | None) -> list[str]:
        """`cap_bytes` of `texts`, remembering when it cut them (results.json's `langs`) and saying
        so in the log. For text the user gave (`--texts`) also a note in the report: someone who
        gave 8 documents and saw 3 scored was not told why (issue 38). The run's own held-out split
        is sampled by the cap on purpose (the report states the cap), so it gets no note."""
        kept = cap_bytes(texts, max_bytes)
        given_docs, given_bytes = len(texts), sum(len(t.encode("utf-8")) for t in texts)
        kept_bytes = sum(len(t.encode("utf-8")) for t in kept)
        if max_bytes is None or kept_bytes >= given_bytes or lang in self.given_sizes:
            return kept
        self.given_sizes[lang] = (given_docs, given_bytes)
        last = " (the last cut short)" if kept and kept[-1] != texts[len(kept) - 1] else ""
        line = (f"{lang}: scored {kept_bytes:,} of {given_bytes:,} bytes, {len(kept):,} of {given_docs:,} "
                f"documents{last}: evaluation.max_bytes_per_lang is {max_bytes:,}")
        log.info("evaluate: %s", line)
        if lang in self.given:
            self.notes.append(f"--texts {line}; `--max-bytes all` (or a larger number) scores more")
        return kept


def plan_suites(
    suites: list[Suite],
    texts_by_lang: dict[str, list[str]],
    config: EvaluationConfig,
    given: dict[str, str] | None = None,
    missing_note: str = "in the run's data; skipped",
) -> Plan:
    """Gather and check every task's data; raise on problems a user must fix.

    A suite that would measure nothing (`suite.unmeasured`) is one of them: the evaluate stage
    would otherwise mark an empty report complete, and `langadapt eval` write one. Languages
    missing beside others that have text are one note ending in `missing_note` (where the text
    was looked for; `langadapt eval` adds what to pass), not one per language and task. `given`
    maps the languages of `texts_by_lang` that the user gave files for to where they came from;
    they are scored whether or not a suite names them."""
    given = given or {}
    plan = Plan(given=[lang for lang in given if texts_by_lang.get(lang)])
    missing: dict[str, list[str]] = {}  # language -> the tasks that wanted it
    measured_by: dict[str, list[str]] = {}  # tokenizer-metrics language -> its tasks
    for suite in suites:
        if (problem := unmeasured(suite, [lang for lang, texts in texts_by_lang.items() if texts])):
            raise LangadaptError(f"evaluate: {problem}")
        info = plan.suites.setdefault(
            suite.name, {"source": suite.source, "description": suite.description, "langs": [], "tasks": []}
        )
        for task in suite.tasks:
            key = f"{suite.name}/{task.name}"
            info["tasks"].append(key)
            if isinstance(task, BpbTask):
                info["langs"] += _plan_bpb(plan, key, task, texts_by_lang, config, given, missing)
            elif isinstance(task, TokenizerMetricsTask):
                plan.tokenizer_langs += [lang for lang in task.langs if lang not in plan.tokenizer_langs]
                for lang in task.langs:
                    measured_by.setdefault(lang, []).append(key)
            elif isinstance(task, MinimalPairsTask):
                plan.pairs[key] = (task, read_minimal_pairs(task.path))
            elif isinstance(task, LmEvalTask):
                plan.lm_eval[key] = (task, prepare_lm_eval(task, f"{suite.source}: task {task.name!r}"))
            elif isinstance(task, TranslationTask):
                plan.translation[key] = (task, read_translation(task.path, task.langs(), task.num_fewshot, f"{suite.source}: task {task.name!r}"))
            elif isinstance(task, GenerateTask):
                for lang, prompts in task.prompts.items():
                    plan.prompts.setdefault(lang, []).extend(prompts)
    for lang in [*plan.given, *plan.tokenizer_langs]:
        if lang not in plan.texts and texts_by_lang.get(lang):
            plan.texts[lang] = plan.capped(lang, texts_by_lang[lang], config.max_bytes_per_lang)
            plan.sources[lang] = given.get(lang, RUN_DATA)
    for lang in plan.tokenizer_langs:
        if lang not in plan.texts:
            missing.setdefault(lang, []).extend(measured_by[lang])
    if missing:
        keys = list(dict.fromkeys(key for keys in missing.values() for key in keys))
        plan.notes.append(f"{', '.join(keys)}: no held-out text for {', '.join(map(repr, missing))} {missing_note}")
    return plan


def _plan_bpb(
    plan: Plan, key: str, task: BpbTask, texts_by_lang: dict, config: EvaluationConfig,
    given: dict[str, str], missing: dict[str, list[str]],
) -> list[str]:
    """Register the languages of one bpb task; returns those that have text (the others go to `missing`)."""
    found = []
    wanted = [(lang, given.get(lang, RUN_DATA), None) for lang in task.langs]
    wanted += [(lang, ", ".join(Path(p).name for p in paths), paths) for lang, paths in task.files.items()]
    for lang, source, paths in wanted:
        texts = read_texts(paths) if paths else texts_by_lang.get(lang, [])
        if not texts:
            missing.setdefault(lang, []).append(key)
            continue
        if lang in plan.sources and plan.sources[lang] != source:
            raise LangadaptError(
                f"{key}: language {lang!r} already scored on {plan.sources[lang]}; use another label"
            )
        plan.texts[lang], plan.sources[lang] = plan.capped(lang, texts, config.max_bytes_per_lang), source
        found.append(lang)
    return found


def bpb_langs(plan: Plan) -> set[str]:
    """Languages some bpb task scores, or the user gave text for (tokenizer-only languages excluded)."""
    return {lang for info in plan.suites.values() for lang in info["langs"]} | set(plan.given)
