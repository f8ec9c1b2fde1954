"""The data stage's slice of the recipe: where the text comes from and how it is cleaned.

Each source says what language it is in, what role it plays in the mixture (target language,
replay of the base model's language, code) and how much of the token budget it gets: either a
`weight` (a share of whatever budget is left) or a number of `epochs` (passes over its unique
tokens). The repetition scheduler (`langadapt.data.schedule`) turns these into tokens per source.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from langadapt.errors import LangadaptError
from langadapt.inputs.files import DEFAULT_MAX_DOCUMENT_BYTES, MAX_DOCUMENT_BYTES_CEILING
from langadapt.recipe.base import Config
from langadapt.recipe.slices import reads

MAX_EPOCHS = 16.0
"""Above this many passes repeated data is worth less than a third of fresh data (D'/D 0.661):
refused unless data.force_epochs (the recipe schema and `data.schedule` both read this one)."""
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


TRAINING_SOURCE_FIELDS = ("weight", "epochs", "max_epochs")
"""A source's share of the training mixture. Read by the training stages (through `stream_mixture`),
never by the data stage: they are in stage1's and stage2's fingerprints and not in the data stage's,
so re-weighting a mixture re-trains without re-cleaning, re-tokenising or re-initialising."""
TRAINING_FIELDS = ("force_epochs", "document_masking", "replay")
"""Keys of this section that only the training stages read (the stream's repetition cap, attention
inside documents, the replay share); in their fingerprints, not the data stage's."""
UNFINGERPRINTED_FIELDS = ("num_workers", "max_document_bytes", "sources[].unique_tokens", "engine", "datatrove")
"""Keys that change no stage's output, so in no fingerprint: how many processes encode the token
shards (the tokenizer stage writes the same shards whatever the number), the bound on one document
(it decides only whether the data stage refuses), a declared size that only `langadapt plan` reads,
and which engine cleans the corpus and how (`engine`, `datatrove`: both write the same bytes)."""
TRAINING_DATA_KEYS = ("data.sources[].name", *(f"data.sources[].{key}" for key in TRAINING_SOURCE_FIELDS),
                      *(f"data.{key}" for key in TRAINING_FIELDS))
"""What the training stages read of the data section: the mixture (each source's weight, epochs,
max_epochs, by name) and the repetition and masking switches. The YAML keeps them under `data:`
(every recipe stays valid); the fingerprints put them where they are read."""
DATA_STAGE_IGNORES = (*(f"data.sources[].{key}" for key in TRAINING_SOURCE_FIELDS),
                      *(f"data.{key}" for key in (*TRAINING_FIELDS, *UNFINGERPRINTED_FIELDS)))
"""Keys of the data section the data stage does not read: changing one must not re-run data,
tokenizer and embeddings (hours at scale)."""


class FetchConfig(Config):
    """How to create a source's file when it is missing: extract a Debian documentation package."""

    debian_package: str
    """Debian package whose HTML documentation is extracted, e.g. `debian-handbook`."""
    locale: str
    """Language folder to keep inside the package, e.g. `nb-NO`."""


class SourceConfig(Config):
    """One corpus: files (or a `datasets` dataset) in one language with one role in the mix."""

    name: str
    """Unique name; becomes the file name of its shards (letters, digits, `_`, `.`, `-`)."""
    path: str | list[str]
    """File(s) or glob(s): .txt/.jsonl/.json/.parquet, optionally .gz/.zst; or a dataset path / hub id."""
    format: Literal["auto", "txt", "jsonl", "parquet", "hf_disk", "hf_hub"] = "auto"
    """File format; `auto` guesses from the extension. `hf_disk` = load_from_disk, `hf_hub` = streaming hub id."""
    text_field: str = "text"
    """Field holding the document text (jsonl, json, parquet, datasets)."""
    txt_unit: Literal["file", "paragraph", "line"] = "paragraph"
    """What one document is in a .txt file: the whole file, a blank-line separated block, or a line."""
    lang: str
    """Language code of the text (ISO 639, e.g. `nb`, `nn`, `en`); `code` sources may use `code`."""
    role: Literal["target", "replay", "code"] = "target"
    """Part in the mixture: the language being learned, replay of the base model's language, or code."""
    weight: float | None = Field(default=None, ge=0)
    """Share of the token budget left after `epochs` sources; if neither weight nor epochs is set, 1."""
    epochs: float | None = Field(default=None, gt=0)
    """Fixed number of passes over this source's unique tokens (instead of a weight)."""
    max_epochs: float | None = Field(default=None, gt=0)
    """Cap on passes for a weighted source; the excess goes to the other weighted sources."""
    unique_tokens: float | None = Field(default=None, gt=0)
    """Declared size in tokens, used by `langadapt plan` when the data is not available locally."""
    max_docs: int | None = Field(default=None, gt=0)
    """Read at most this many documents (before cleaning): a streamed hf_hub source stops there."""
    valid_path: str | list[str] | None = None
    """Explicit held-out file(s) for this source; otherwise documents are held out by hash."""
    fetch: FetchConfig | None = None
    """Create `path` from a Debian documentation package when it matches no file."""
    subset: str | None = None
    """hf_hub: the dataset's config (load_dataset's `name`), e.g. `no` for CulturaX's Norwegian part."""
    revision: str | None = None
    """hf_hub: the Hub commit (or tag/branch) to read; a commit hash pins the data (part of the fingerprint)."""
    data_files: str | list[str] | dict[str, str | list[str]] | None = None
    """hf_hub: only these files of the dataset repo (globs; a mapping names files per split)."""
    split: str = "train"
    """hf_hub / hf_disk: the split to read."""
    streaming: bool = True
    """hf_hub: stream rows (nothing is downloaded beyond what is read); false downloads and caches it first."""

    @field_validator("name")
    @classmethod
    def _check_name(cls, name: str) -> str:
        if not _NAME.match(name) or name == "valid":
            raise ValueError(
                f"source name {name!r} must be letters, digits, '_', '.', '-' (and not 'valid')"
            )
        return name

    @model_validator(mode="after")
    def _weight_or_epochs(self) -> SourceConfig:
        if self.weight is not None and self.epochs is not None:
            raise ValueError(f"source {self.name}: set either weight or epochs, not both")
        return self

    @model_validator(mode="after")
    def _hub_keys_need_hub(self) -> SourceConfig:
        """Hub-only keys on a file source would be silently ignored: refuse them instead."""
        hub_only = {"subset": None, "revision": None, "data_files": None, "streaming": True}
        if self.format != "hf_hub":
            for key, default in hub_only.items():
                if getattr(self, key) != default:
                    raise ValueError(f"source {self.name}: {key} applies only to format: hf_hub")
            if self.split != "train" and self.format != "hf_disk":
                raise ValueError(f"source {self.name}: split applies only to format: hf_hub or hf_disk")
        elif not isinstance(self.path, str):
            raise ValueError(f"source {self.name}: an hf_hub path is one dataset id, not a list")
        return self

    @property
    def pinned(self) -> bool:
        """Whether an hf_hub source's content is fixed: a commit hash, or a local folder (whose files the
        fingerprint hashes). A branch, a tag or no revision reads whatever the Hub has that day."""
        if isinstance(self.path, str) and Path(self.path).is_dir():
            return True
        return self.revision is not None and re.fullmatch(r"[0-9a-f]{40}", self.revision) is not None

    def describe(self) -> str:
        """One line for `--dry-run`: where the text comes from and its part in the mixture."""
        share = f"epochs {self.epochs:g}" if self.epochs is not None else f"weight {self.effective_weight:g}"
        where = f"{self.path}" if isinstance(self.path, str) else ", ".join(self.path)
        if self.format == "hf_hub":
            revision = f"{self.revision or 'latest'}{'' if self.pinned else ' (not pinned to a commit)'}"
            where = f"hub {self.path} subset {self.subset or '-'} split {self.split} revision {revision}"
            if self.data_files is not None:
                where += f" data_files {self.data_files}"
        cap = f", max_docs {self.max_docs:,}" if self.max_docs is not None else ""
        return f"{self.name} ({self.lang}, {self.role}, {share}{cap}): {where}"

    @property
    def effective_weight(self) -> float | None:
        """The weight used for budget splitting (1 when neither weight nor epochs is set)."""
        if self.epochs is not None:
            return None
        return 1.0 if self.weight is None else self.weight


class CleaningConfig(Config):
    """Document filters, applied in this order; each drop is counted by reason in the manifest."""

    normalize_nfc: bool = True
    """Unicode NFC normalisation, so that `å` has one encoding whatever the source used."""
    strip: bool = True
    """Strip leading/trailing whitespace from each document."""
    min_chars: int = Field(default=1, ge=0)
    """Drop documents shorter than this (characters, after normalisation)."""
    max_chars: int | None = Field(default=None, gt=0)
    """Drop documents longer than this; None keeps all."""
    exact_dedup: bool = True
    """Drop documents whose text is identical to an earlier one (across all sources)."""
    near_dedup: bool = False
    """Drop near-duplicates by MinHash LSH on word 5-grams (needs `datasketch`)."""
    near_dedup_threshold: float = Field(default=0.85, gt=0, lt=1)
    """Estimated Jaccard similarity above which a document counts as a near-duplicate."""
    near_dedup_num_perm: int = Field(default=128, ge=16)
    """MinHash permutations: more is more exact and slower."""
    lang_filter: bool = False
    """Keep only documents whose detected language is the source's `lang` (needs `py3langid`)."""
    lang_filter_min_chars: int = Field(default=200, ge=0)
    """Documents shorter than this skip the language check (too little text to decide)."""
    lang_aliases: dict[str, list[str]] = Field(default_factory=dict)
    """Extra labels accepted per language, e.g. {se: [fi]}; nb/nn/no already accept each other."""


class DatatroveConfig(Config):
    """How `data.engine: datatrove` runs: cleaning as datatrove tasks (one node or a Slurm array),
    then one task that merges them (dedup, held-out split, writing) and runs the stages after data."""

    executor: Literal["local", "slurm"] = "local"
    """local: `LocalPipelineExecutor` on this node (what `langadapt run` uses); slurm: `SlurmPipelineExecutor`
    jobs submitted by `langadapt.cli.datatrove_slurm.submit_preparation` from a login node."""
    tasks: int | None = Field(default=None, ge=1)
    """Cleaning tasks, each a contiguous run of the corpus's pieces; None: one per piece, at most 1000 (a
    Slurm array's usual limit). A finished task is skipped on a re-run."""
    workers: int | None = Field(default=None, ge=1)
    """Tasks running at once: local, processes on this node (None: every core); slurm, array tasks at once (None: no limit)."""
    partition: str | None = None
    """slurm: the CPU partition of every preparation job, read only where `cluster.preparation.partition` (the
    one source) is unset, and refused if it differs; None: that one (else the site's default)."""
    cpus_per_task: int = Field(default=1, ge=1)
    """slurm: cores of each cleaning task (one process cleans one piece at a time)."""
    mem_per_cpu_gb: int = Field(default=2, ge=1)
    """slurm: memory per core, GB, of the cleaning tasks."""
    finish_cpus: int = Field(default=16, ge=1)
    """slurm: cores of the last job (merge, tokenizer with its shard encoding, embeddings); its memory is the same per core."""
    time: str = "12:00:00"
    """slurm: time limit of each job (HH:MM:SS or D-HH:MM:SS)."""
    job_name: str | None = None
    """slurm: job name prefix; None: the recipe's run name (jobs `<name>-clean`, `<name>-prepare`)."""
    logging_dir: str | None = None
    """Where datatrove keeps its logs, stats and completion markers (on a filesystem every node sees); None:
    `.data.datatrove/` in the run directory, beside the cleaned pieces."""
    env_command: str | None = None
    """slurm: shell line each job runs first to find Python (e.g. `source /project/venv/bin/activate`); None:
    the submitting shell's environment is exported."""
    sbatch_args: dict[str, str] = Field(default_factory=dict)
    """slurm: extra sbatch options of every job, name -> value without dashes, e.g. {qos: normal}; an
    `account` or `partition` here may only repeat `cluster.preparation`'s (the one source of both)."""

    @field_validator("time", mode="before")
    @classmethod
    def _sexagesimal(cls, value: Any) -> Any:
        """YAML 1.1 reads an unquoted `12:00:00` as the integer 43200 (seconds): written back as H:MM:SS."""
        if isinstance(value, int) and not isinstance(value, bool):
            return f"{value // 3600}:{value % 3600 // 60:02d}:{value % 60:02d}"
        return value


class DataConfig(Config):
    """Sources, cleaning and the held-out split of the data stage."""

    sources: list[SourceConfig] = Field(min_length=1)
    """The corpora; their weights/epochs define the training mixture (read by the training stages: changing
    them re-runs stage 1 onward, not data, tokenizer or embeddings); `replay` can set the replay share instead
    of hand-balanced weights."""
    cleaning: CleaningConfig = Field(default_factory=CleaningConfig)
    """Normalisation, length filters, deduplication and language filter."""
    valid_fraction: float = Field(default=0.05, ge=0, lt=1)
    """Share of each source held out by document hash (sources with `valid_path` use that instead)."""
    max_valid_docs: int | None = Field(default=None, gt=0)
    """Cap on held-out documents per source (the lowest hashes are kept; the rest train)."""
    min_valid_documents: int = Field(default=1, ge=0)
    """Floor on held-out documents per target source without a valid_path when valid_fraction > 0: the
    documents of the lowest split keys are held out until it is reached (whole key groups; the last train
    document always trains), so a tiny corpus or fraction still measures its language; 0: the hash alone. 1 by
    default: the least that makes the reports measure something, and it changes no split that already holds
    one out."""
    split_by: Literal["text", "id"] = "text"
    """What the held-out hash is taken of. text: each document's cleaned text (exact duplicates land on the
    same side). id: the last path component of the document's `id` field (`.../nb-NO/intro.html` and
    `.../en-US/intro.html` both hash `intro.html`), so the translations of one page are held out together in
    every language and a translation task can use them; documents without an id (.txt files, rows without the
    field) fall back to their text (counted as split_by_text_fallback in the data summary, and said in a
    warning). A source of two or more documents whose ids all share one last path component is refused: one
    key group is held out whole or not at all, the outcome `valid_fraction: 0` is refused for."""
    on_decode_error: Literal["error", "replace", "skip"] = "error"
    """Invalid UTF-8: stop with file and byte offset, replace bad bytes with U+FFFD, or skip the document."""
    max_document_bytes: int = Field(default=DEFAULT_MAX_DOCUMENT_BYTES, ge=1, le=MAX_DOCUMENT_BYTES_CEILING)
    """Bound on one document as read, in bytes (a line, a paragraph, a whole .txt file per `txt_unit`, a
    Parquet cell, a .json array file): a longer one stops the data stage naming its file and line while it is
    being decompressed, so a file that expands to gigabytes in one line never reaches memory (64 MiB; at most
    256 MiB)."""
    num_workers: int | None = Field(default=None, ge=1)
    """Processes that clean the sources (data stage) and encode the token shards (tokenizer stage); None:
    every core this process may run on (one process for small inputs, where starting workers costs more than
    they save). In no fingerprint: 1 and N workers write the same bytes."""
    engine: Literal["local", "datatrove"] = "local"
    """Who runs the data stage: local, worker processes of this process (`num_workers`); datatrove, cleaning
    as datatrove tasks with per-task completion markers (`datatrove`; pip install 'langadapt[prep]'). The same
    bytes either way, so in no fingerprint."""
    datatrove: DatatroveConfig = Field(default_factory=DatatroveConfig)
    """Executor and tasks of `engine: datatrove` (one node, or Slurm jobs across many)."""
    force_epochs: bool = False
    """Allow more than 16 epochs of a source (repeated data is then worth < 1/3 of fresh data)."""
    document_masking: bool = False
    """Training attends only within each packed document (position ids restart after every EOS); on GPUs use
    engine.attn_implementation: flex_attention (H100: 1.35x masked SDPA)."""
    replay: float | None = Field(default=None, ge=0, lt=1)
    """Share of each training stage's tokens from the `role: replay` sources with weight > 0 (split by their
    weights; the other trained sources share the rest by theirs); None: the weights as written. A stage's own
    `replay` overrides it. Anchors: 1-5% for small shifts, up to ~25% for a new language (Ibrahim et al. 2024,
    Simple and Scalable Strategies to Continually Pre-train LLMs); Poro 2 (Llama-3.1-8B to Finnish) replayed
    30% English, 30% code, 10% math and lost 1.1 points of English."""

    @model_serializer(mode="wrap")
    def _without_default_split(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """`split_by: text` and `min_valid_documents: 1` (the split before the settings existed, as
        far as any run that held a document out is concerned) are left out of the dumped recipe, so
        the data stage's fingerprint of every earlier run stays what it was."""
        dumped = handler(self)
        if self.split_by == "text":
            dumped.pop("split_by", None)
        if self.min_valid_documents == 1:
            dumped.pop("min_valid_documents", None)
        return dumped

    @field_validator("sources")
    @classmethod
    def _unique_names(cls, sources: list[SourceConfig]) -> list[SourceConfig]:
        seen: set[str] = set()
        for source in sources:
            if source.name in seen:
                raise ValueError(f"source name {source.name!r} is used twice")
            seen.add(source.name)
        return sources

    @model_validator(mode="after")
    def _floor_under_cap(self) -> DataConfig:
        if self.max_valid_docs is not None and self.min_valid_documents > self.max_valid_docs:
            raise ValueError(f"min_valid_documents ({self.min_valid_documents}) is above max_valid_docs "
                             f"({self.max_valid_docs}): lower it, or raise the cap")
        return self

    @model_validator(mode="after")
    def _budget_is_sane(self) -> DataConfig:
        weighted = [s for s in self.sources if s.epochs is None]
        if weighted and all(s.effective_weight == 0 for s in weighted):
            names = ", ".join(s.name for s in weighted)
            raise ValueError(f"weights of sources {names} sum to zero: give at least one a weight > 0")
        if not self.force_epochs:
            for s in self.sources:
                for value in (s.epochs, s.max_epochs):
                    if value is not None and value > MAX_EPOCHS:
                        raise ValueError(
                            f"source {s.name}: {value:g} epochs is above {MAX_EPOCHS:g} "
                            "(repeated data is then worth < 1/3 of fresh data); set force_epochs: true"
                        )
        return self


def stream_mixture(
    config: DataConfig, overrides: Mapping[str, BaseModel | dict] | None = None, roles: set[str] | None = None
) -> dict[str, dict]:
    """The `mixture` argument of `langadapt.data.stream.build_stream` for these sources.

    A source without weight or epochs gets weight 1, as documented on `SourceConfig.weight`.
    `overrides` is a training stage's `mixture`: an entry REPLACES that source's weight/epochs/
    max_epochs (a short stage 1 takes shares where stage 2 takes epochs); unlisted sources keep
    the data section's settings. `roles` restricts the mixture (e.g. only `target` sources).
    """
    overrides = {name: e.model_dump() if isinstance(e, BaseModel) else dict(e) for name, e in (overrides or {}).items()}
    names = [s.name for s in config.sources]
    for name in overrides:
        if name not in names:
            close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}?" if close else f"sources are {', '.join(names)}"
            raise LangadaptError(f"mixture: unknown source {name!r}; {hint}")
    mixture: dict[str, dict] = {}
    for source in config.sources:
        if roles is not None and source.role not in roles:
            continue
        if source.name in overrides:
            entry = {k: v for k, v in overrides[source.name].items() if v is not None}
        else:
            entry = {"epochs": source.epochs} if source.epochs is not None else {"weight": source.effective_weight or 0.0}
            if source.max_epochs is not None:
                entry["max_epochs"] = source.max_epochs
        mixture[source.name] = entry
    return mixture


@dataclass(frozen=True)
class DataSlice:
    """What the data stage reads of the recipe (its stage entry is `run(slice, ctx)`)."""

    config: DataConfig = reads("data", ignores=DATA_STAGE_IGNORES)
