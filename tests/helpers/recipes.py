"""The smallest valid recipe, as text: a scratch Llama trained on one local source.

Tests that stub the stages (or only plan) need a recipe that loads, not one that trains well;
each writes it into its tmp folder with `scratch_recipe(tmp_path, ...)`.
"""

from __future__ import annotations

from pathlib import Path

TEMPLATE = """\
name: {name}
run_root: {root}/runs
init: scratch
base_model:
  architecture: {{model_type: llama}}
data:
  sources:
    - {{name: {lang}, path: {root}/{source}, lang: {lang}}}
tokenizer:
  vocab_size: 300
"""


def scratch_recipe(root: Path, name: str, source: str = "nb.txt", lang: str = "nb") -> str:
    """The recipe text with its run_root under `root` and its one source at `root/source`."""
    return TEMPLATE.format(root=root, name=name, source=source, lang=lang)
