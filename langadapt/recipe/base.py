"""Base class for every component's config.

Each component (data, tokenizer, embeddings, training, evaluation, export) has a small config
class derived from `Config`, in its module of this package (`recipe/data.py`, ...);
`langadapt.recipe.Recipe` composes them. Strictness lives here so
that every slice behaves the same: unknown keys are errors (the recipe loader turns them into
"did you mean" messages) and the attribute docstrings become the field descriptions that
`langadapt run --explain` prints.
"""

from typing import Any

from pydantic import BaseModel, ConfigDict


class FieldProblem(ValueError):
    """A validator's complaint about one key below the model it validates.

    pydantic locates a model validator's error at the model itself (`stage2`), but the key to fix
    is often one level down (`stage2.schedule.warmup_steps`) or is a list item (`data.sources[2].lang`).
    `loc` is that key's path relative to the validated model; `recipe.errors.format_validation_error`
    appends it, so the error line names the key and its YAML line like any field error.
    """

    def __init__(self, loc: tuple[Any, ...], what: str) -> None:
        super().__init__(what)
        self.loc = loc


class Config(BaseModel):
    """Strict, documented config: unknown keys fail, field docstrings are the documentation."""

    model_config = ConfigDict(
        extra="forbid",
        use_attribute_docstrings=True,
        validate_default=True,
        protected_namespaces=(),
        allow_inf_nan=False,  # `.inf` / `.nan` (or a 400-digit float) is never a sensible setting
        # A library caller edits a loaded recipe in Python (`recipe.stage2.steps = 2000`); without
        # this, `= "many"` is stored as it is and fails far from the line that set it, or never.
        validate_assignment=True,
    )
