"""The data side of the preflight check: corpus files, vocabulary size, epochs per source.

Split from `preflight` because these read the corpus (file sizes, and one pass over a small
target corpus for the vocabulary bound); `preflight` holds the model and suite checks.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from langadapt.data.corpus_size import bpe_vocab_ceiling, uncompressed_bytes
from langadapt.data.epochs import stage_plan
from langadapt.data.source_paths import local_files, matched_inputs, unmatched_patterns, why_unmatched
from langadapt.data.sources import iter_texts
from langadapt.errors import LangadaptError
from langadapt.inputs.compression import input_problem
from langadapt.inputs.model_folder import tokenizer_id_count
from langadapt.planning.training import global_batch
from langadapt.recipe import Recipe
from langadapt.recipe.data import SourceConfig
from langadapt.recipe.replay import stage_mixture

if TYPE_CHECKING:
    from langadapt.recipe.errors import Report
    from langadapt.recipe.tokenizer import TokenizerConfig

log = logging.getLogger("langadapt")

CEILING_MAX_BYTES = 16 << 20
"""Read at most this much target text for the vocabulary bound (~1 s); larger corpora skip it."""
BYTES_PER_TOKEN_FLOOR = 1.5
"""Before the tokenizer stage has run, a source's tokens are estimated as bytes / this. Trained
tokenizers average 3-5 bytes per token on their own language; a floor this low overestimates the
tokens, so an epoch count found too high from it is too high for real (no false refusals)."""


def check_sources(recipe: Recipe, report: Report) -> None:
    """Every `path` / `valid_path` pattern matches a file (or `fetch` will create it), and every
    file it matches is readable input (`inputs.compression.input_problem`: a regular file, not empty, its
    compression intact at the start) outside this run's own folder."""
    run_dir = recipe.run_dir.resolve()
    for i, source in enumerate(recipe.data.sources):
        for key, pattern in unmatched_patterns(source):
            report.add(("data", "sources", i, key),
                       f"{pattern!r} {why_unmatched(pattern)} (source {source.name}, cwd {Path.cwd()})")
        for key, path in matched_inputs(source):
            problem = _inside(path, run_dir) or input_problem(path)
            if problem is not None:
                report.add(("data", "sources", i, key), problem)


def _inside(path: Path, run_dir: Path) -> str | None:
    """A corpus inside the run's own folder is the run's output (a glob like runs/** matching
    data/train/*.jsonl.gz): reading it would train on what an earlier attempt wrote, and a re-run
    of the data stage would replace it while it is being read."""
    if path.resolve().is_relative_to(run_dir):
        return f"{path} is inside this run's own folder {run_dir}: an input must not be the run's output"
    return None


def check_vocab_size(recipe: Recipe, base_tokenizer: dict | None, report: Report) -> None:
    """Above the special + byte tokens the tokenizer always has, and below what the corpus can yield."""
    cfg = recipe.tokenizer
    if cfg.kind == "keep_base":
        _check_kept_size(cfg, base_tokenizer)
        return
    if cfg.kind == "extend":
        from langadapt.tokenizer.extend import extension_problem

        if base_tokenizer is not None and (problem := extension_problem(base_tokenizer, cfg.vocab_size)):
            report.add_line(problem)
        return  # the new tokens' shortfall on a small corpus is the tokenizer stage's warning
    family = cfg.kind if cfg.kind != "inherit" else _family(base_tokenizer)
    if cfg.special_tokens is not None:
        specials = len(cfg.special_tokens)
    elif base_tokenizer is not None:
        specials = len(base_tokenizer.get("added_tokens", []))
    else:  # the scratch defaults of `tokenizer.families`
        specials = 3 if family == "byte_bpe" else 4
    fixed = specials + len(cfg.added_tokens)
    if cfg.vocab_size <= fixed + 256:
        report.add(("tokenizer", "vocab_size"), f"{cfg.vocab_size} is too small for {family or cfg.kind}: "
                   f"{fixed} special and added tokens + 256 byte tokens need at least {fixed + 257}")
        return
    if family not in ("byte_bpe", "sentencepiece_bpe"):
        return  # a Unigram vocabulary is not bounded by merges
    ceiling, what = _vocab_ceiling(recipe, fixed + 256, report)
    if ceiling is not None and cfg.vocab_size > ceiling:
        report.add(("tokenizer", "vocab_size"), f"{cfg.vocab_size:,} is more than a BPE vocabulary can have "
                   f"on this corpus (at most {ceiling:,}: {what}); lower it")


def _check_kept_size(cfg: TokenizerConfig, base_tokenizer: dict | None) -> None:
    """A `vocab_size` written beside `kind: keep_base` that is not the base's own size is said, not
    silently ignored. A warning, not a refusal: a frontier's grid over `tokenizer.kind` keeps the
    recipe's `vocab_size` for its keep_base point, where it means nothing."""
    if "vocab_size" not in cfg.model_fields_set or base_tokenizer is None:
        return
    size = tokenizer_id_count(base_tokenizer) or 0
    if cfg.vocab_size != size:
        log.warning("tokenizer.vocab_size: %s is ignored with kind keep_base, which keeps the base tokenizer's "
                    "%s ids as they are (kind extend grows the base's vocabulary to vocab_size)",
                    f"{cfg.vocab_size:,}", f"{size:,}")


def _family(tokenizer_json: dict | None) -> str | None:
    from langadapt.tokenizer.families import family_of

    return "byte_bpe" if tokenizer_json is None else family_of(tokenizer_json, strict=False)


def _training_sources(recipe: Recipe) -> list[SourceConfig]:
    """The sources the tokenizer trains on (see `TokenizerConfig.language_weights`)."""
    weights = recipe.tokenizer.language_weights
    if weights:
        return [s for s in recipe.data.sources if weights.get(s.lang, 0) > 0]
    return [s for s in recipe.data.sources if s.role == "target"]


def _vocab_ceiling(recipe: Recipe, fixed: int, report: Report) -> tuple[int | None, str]:
    """An upper bound on the learnable vocabulary and how it was found; None when unknown (or when a
    source has no text at all: that source is the problem, reported on its path, not vocab_size)."""
    sources = _training_sources(recipe)
    files = {s.name: local_files(s) for s in sources}
    if not sources or any(f is None for f in files.values()):
        return None, ""  # to be fetched, or a dataset: known only after the data stage
    sizes = [uncompressed_bytes(p) for s in sources for p in files[s.name] or []]
    if any(size is None for size in sizes):
        return None, ""
    total = sum(sizes)  # type: ignore[arg-type]
    if total <= CEILING_MAX_BYTES:
        blank = [s for s in sources if not any(text.strip() for text in _texts([s], files))]  # type: ignore[arg-type]
        for source in blank:
            index = recipe.data.sources.index(source)
            report.add(("data", "sources", index, "path"), f"every document of source {source.name} is empty or "
                       f"whitespace ({', '.join(str(p) for p in files[source.name] or [])}): no text to train on")
        if blank:
            return None, ""
        texts = _texts(sources, files)  # type: ignore[arg-type]
        return bpe_vocab_ceiling(texts, fixed), f"the distinct words of {_size(total)} of training text"
    return fixed + total, f"one merge per byte of {_size(total)} of training text"


def _size(num_bytes: int) -> str:
    return f"{num_bytes / 1e6:.1f} MB" if num_bytes >= 100_000 else f"{num_bytes:,} bytes"


def _texts(sources: list[SourceConfig], files: dict[str, list[Path]]) -> Iterator[str]:
    for source in sources:
        yield from iter_texts(source, files[source.name], "replace", Counter())


def report_estimated_epochs(recipe: Recipe, stages: list[str], world_size: int, report: Report) -> None:
    """Epochs per source as training will compute them (`data.epochs.stage_plan`), before any training."""
    from langadapt.planning.recipe_plan import measured_tokens

    measured = measured_tokens(recipe)
    for name in stages:
        stage = getattr(recipe, name)
        try:
            entries = stage_mixture(recipe.data, name, stage)
        except LangadaptError as exc:
            report.add((name, "mixture"), str(exc).removeprefix("mixture: "))
            continue
        sizes, estimated = {}, []
        for source in recipe.data.sources:
            if source.name not in entries:
                continue
            size = measured.get(source.name) or source.unique_tokens or _estimated_tokens(source)
            if size is None:
                break  # unknown until the tokenizer stage has run: training checks it then
            if source.name not in measured and not source.unique_tokens:
                estimated.append(source.name)
            if source.name in measured and size < stage.seq_len + 1:
                report.add((name, "seq_len"), f"source {source.name} has {int(size)} tokens, "
                           f"fewer than one sample of {stage.seq_len + 1}")
            sizes[source.name] = size
        else:
            samples = stage.steps * global_batch(stage, world_size, name)
            try:
                stage_plan(entries, sizes, stage.seq_len, samples, force=recipe.data.force_epochs)
            except LangadaptError as exc:
                if estimated and "epochs is above" not in str(exc):
                    continue  # overestimated sizes make fixed-epoch sources look too big: wait for real counts
                note = (f" (tokens of {', '.join(estimated)} estimated from file size at "
                        f"{BYTES_PER_TOKEN_FLOOR:g} bytes/token)") if estimated else ""
                report.add((name, "steps"), f"{exc}{note}")


def _estimated_tokens(source: SourceConfig) -> float | None:
    files = local_files(source)
    sizes = [uncompressed_bytes(p) for p in files or []]
    if not files or any(size is None for size in sizes):
        return None
    return sum(sizes) / BYTES_PER_TOKEN_FLOOR  # type: ignore[arg-type]
