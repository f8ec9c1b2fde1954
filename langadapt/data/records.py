"""One document as a source's reader yields it, and a record (a JSON object, a `datasets` row) made into one.

Shared by every reader (`data.sources` for text and JSON, `parquet_reader`, `hf_reader`), below
them all, so that each reads its format and none imports another.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from langadapt.errors import LangadaptError
from langadapt.recipe.data import SourceConfig

ID_FIELD = "id"
"""The field (JSON key, `datasets` or Parquet column) holding a document's id, when it has one:
what `data.split_by: id` splits by."""


class Document(NamedTuple):
    """One document as read: its raw text, and its `ID_FIELD` as text when its record has one
    (JSON, `datasets` and Parquet rows; .txt documents and rows without the field have none)."""

    text: str
    id: str | None = None


def record_document(source: SourceConfig, path: Path | str, record: object, where: str) -> Document:
    """A JSON object or `datasets` row as a `Document`: its `text_field` (text or null) and its id."""
    if not isinstance(record, dict):
        raise LangadaptError(f"source {source.name}: {where} of {path} is not a JSON object")
    if source.text_field not in record:
        keys = ", ".join(sorted(record)) or "none"
        raise LangadaptError(
            f"source {source.name}: field {source.text_field!r} not found at {where} of {path} "
            f"(keys: {keys}); set text_field"
        )
    value = record[source.text_field]
    if value is not None and not isinstance(value, str):
        raise LangadaptError(
            f"source {source.name}: field {source.text_field!r} at {where} of {path} is "
            f"{type(value).__name__}, not text"
        )
    return Document(value or "", id_text(record.get(ID_FIELD)))


def id_text(value: object) -> str | None:
    """A record's id as text (numbers too); None when it has none."""
    return None if value is None or value == "" else str(value)
