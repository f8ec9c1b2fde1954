"""What the export needs to know about where a run came from: the base model's Hub id, the
sources' Hub ids, languages and licences, the held-out split, and the recipe to publish.

The pipeline builds `RunFacts` from the recipe and hands it to the export stage (a stage gets a
slice, never the whole recipe). Licences are read from the notes that the corpus builders write
beside each file (`<file>.LICENSE.txt`, see `langadapt.corpora.debian_docs`): the recipe itself
does not declare them, and a card must not claim a licence the data does not allow.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from langadapt.errors import LangadaptError
from langadapt.inputs.text import read_input_text
from langadapt.recipe.export import ExportConfig
from langadapt.recipe.hints import set_option
from langadapt.recipe.slices import reads
from langadapt.run.base_model import hub_repo_id

if TYPE_CHECKING:
    from langadapt.recipe import Recipe

RESTRICTIVE_LICENCE = re.compile(r"GPL|GFDL|\bFDL\b|BY-SA|share-?alike|\bNC\b|non-?commercial|\bND\b|no-?deriv",
                                 re.IGNORECASE)
"""Licence families whose terms reach a model trained on the text (copyleft, share-alike,
non-commercial, no-derivatives): the user must choose the model's licence, none is assumed."""
LICENCE_NOTE_SUFFIX = ".LICENSE.txt"


@dataclass(frozen=True)
class SourceFacts:
    """One data source as the card describes it."""

    name: str
    lang: str
    role: str
    hub_ids: tuple[str, ...]
    """Hub dataset ids (sources read with format hf_hub), for the card's `datasets`."""
    files: tuple[str, ...]
    """The source's `path` patterns (local sources), beside which the licence notes lie."""
    held_out: str
    """Where its held-out documents come from."""

    @property
    def licences(self) -> tuple[str, ...]:
        """Licences named by the notes beside the source's files (empty: none found). Read when
        asked, not when the recipe is read: a fetched source's files and notes appear only once the
        data stage has fetched them, and a first run's card must list them too."""
        return _licence_notes(list(self.files))

    @property
    def restrictive_licences(self) -> list[str]:
        return [licence for licence in self.licences if RESTRICTIVE_LICENCE.search(licence)]


@dataclass(frozen=True)
class RunFacts:
    """The recipe's facts the export stage reads (built by the pipeline with `from_recipe`)."""

    init: str
    base_hub_id: str | None
    """The base model's Hub id when it came from the Hub, else None (a local folder says nothing public)."""
    base_label: str | None
    """The base as the recipe names it, machine paths stripped (for the card's text)."""
    target_languages: tuple[str, ...]
    sources: tuple[SourceFacts, ...]

    @classmethod
    def from_recipe(cls, recipe: Recipe) -> RunFacts:
        data, warm = recipe.data, recipe.init == "warm"
        hashed = "a hash of its page name (the last part of its id)" if data.split_by == "id" else "a hash of its text"
        by_hash = (f"{data.valid_fraction:.0%} of its documents, each chosen by {hashed}"
                   + (f" (at most {data.max_valid_docs})" if data.max_valid_docs else ""))
        sources = tuple(
            SourceFacts(name=s.name, lang=s.lang, role=s.role,
                        hub_ids=tuple(_patterns(s.path)) if s.format == "hf_hub" else (),
                        files=() if s.format == "hf_hub" else tuple(_patterns(s.path)),
                        held_out=f"its held-out file(s) {', '.join(Path(p).name for p in _patterns(s.valid_path))}"
                        if s.valid_path else by_hash)
            for s in data.sources)
        return cls(init=recipe.init, base_hub_id=hub_repo_id(recipe.base_model.path) if warm else None,
                   base_label=strip_machine_paths(recipe.base_model.path) if warm else None, sources=sources,
                   target_languages=tuple(sorted({s.lang for s in data.sources if s.role == "target"})))


def _patterns(paths: str | list[str] | None) -> list[str]:
    return [] if paths is None else [paths] if isinstance(paths, str) else list(paths)


def _licence_notes(paths: str | list[str]) -> tuple[str, ...]:
    """The `licence:` lines of the notes beside a source's files, each licence once."""
    found: list[str] = []
    for pattern in _patterns(paths):
        for file in sorted(glob.glob(pattern, recursive=True)) or [pattern]:
            note = Path(file + LICENCE_NOTE_SUFFIX)
            if not note.is_file():
                continue
            for line in read_input_text(note, "licence note", errors="replace").splitlines():
                key, sep, value = line.strip().partition(":")
                if sep and key.lower() in ("licence", "license") and value.strip() not in found:
                    found.append(value.strip())
    return tuple(found)


def strip_machine_paths(value: Any) -> Any:
    """`value` (a recipe tree, or one string) with every absolute path replaced by `<local>/NAME`:
    it names a user's home or a cluster's file system, which a public repository should not show."""
    if isinstance(value, dict):
        return {k: strip_machine_paths(v) for k, v in value.items()}
    if isinstance(value, list):
        return [strip_machine_paths(v) for v in value]
    if isinstance(value, str) and (os.path.isabs(value) or value.startswith("~")):
        return f"<local>/{Path(value).name}" if Path(value).name else "<local>"
    return value


def publishable_recipe(resolved_yaml: str) -> str:
    """The resolved recipe with machine paths stripped (relative paths and Hub ids stay)."""
    return yaml.safe_dump(strip_machine_paths(yaml.safe_load(resolved_yaml) or {}), sort_keys=False,
                          allow_unicode=True)


@dataclass(frozen=True)
class ExportSlice:
    """What the export stage reads of the recipe: its section and the facts above (here, beside
    `RunFacts`, rather than in `recipe/export.py`, which the recipe schema composes)."""

    config: ExportConfig = reads("export")
    facts: RunFacts = reads("init", "base_model.path", "data.valid_fraction", "data.max_valid_docs",
                            *(f"data.sources[].{key}" for key in ("name", "lang", "role", "format", "path", "valid_path")))
    """The recipe's facts the model card states (languages, sources and their licences, the base):
    the keys `RunFacts.from_recipe` reads. `data.split_by`, which names the held-out rule in the
    card's text, is in the data stage's print, which the chain carries."""


def trained_sources(facts: RunFacts, tokens: dict[str, dict[str, int]]) -> list[str]:
    """Sources that contributed tokens (evaluation-only ones, weight 0, did not); all when the
    checkpoints recorded nothing."""
    trained = {name for per_source in tokens.values() for name, count in per_source.items() if count > 0}
    return [s.name for s in facts.sources if s.name in trained or not trained]


def check_licence(config: ExportConfig, facts: RunFacts, tokens: dict[str, dict[str, int]]) -> None:
    """`export.license` must be chosen when a source the model was trained on says so."""
    if config.license:
        return
    trained = trained_sources(facts, tokens)
    for source in facts.sources:
        if source.restrictive_licences and source.name in trained:
            raise LangadaptError.at("export.license", f"not set, and the model was trained on source {source.name} "
                                    f"({source.restrictive_licences[0]}); choose the model's licence, "
                                    f"e.g. {set_option('export.license', 'cc-by-sa-4.0')}")
