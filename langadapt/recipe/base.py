"""Base class for every component's config.

Each component (data, tokenizer, embeddings, training, evaluation, export) owns a small config
class derived from `Config`; `langadapt.recipe.Recipe` composes them. Strictness lives here so
that every slice behaves the same: unknown keys are errors (the recipe loader turns them into
"did you mean" messages) and the attribute docstrings become the field descriptions that
`langadapt run --explain` prints.
"""

from pydantic import BaseModel, ConfigDict


class Config(BaseModel):
    """Strict, documented config: unknown keys fail, field docstrings are the documentation."""

    model_config = ConfigDict(
        extra="forbid",
        use_attribute_docstrings=True,
        validate_default=True,
        protected_namespaces=(),
    )
