"""Language codes: every recipe key that names a language is checked against the IANA language
subtag registry (ISO 639 codes, as BCP 47 tags), through the `langcodes` package.

A language name where a code belongs (`lang: Norwegian`) otherwise passes validation and fails
much later, or silently: the language filter drops every document, the held-out split has no
`Norwegian` to score, the model card declares a language nobody knows. `language_problem` is the
one check; `LanguageCode` applies it to a field.
"""

from __future__ import annotations

from typing import Annotated

import langcodes
from pydantic import AfterValidator

CODE = "code"
"""Not a language: the label of programming-code sources (`role: code`) and their held-out scores."""


def language_problem(code: str) -> str | None:
    """Why `code` is not a language code, or None. Accepts registered BCP 47 tags (`nb`, `se`,
    `nb-NO`, `nob`) and `code`; refuses names (`Norwegian`), unregistered codes (`xx`) and the
    `nb_NO` spelling, which langcodes would quietly repair but the rest of the toolkit would not."""
    if code == CODE:
        return None
    if "_" not in code and langcodes.tag_is_valid(code):
        return None
    return f"{code[:40]!r} is not a language code (ISO 639 / BCP 47, e.g. nb, nn, en, se)"


def _check(code: str) -> str:
    problem = language_problem(code)
    if problem is not None:
        raise ValueError(problem)
    return code


LanguageCode = Annotated[str, AfterValidator(_check)]
"""A `str` field that must hold a language code (or `code`)."""
