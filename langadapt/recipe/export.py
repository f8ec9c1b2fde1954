"""Export settings: the Hugging Face folder, its model card, the checks before a push, the push."""

from __future__ import annotations

from typing import Literal

from langadapt.recipe.base import Config
from langadapt.recipe.languages import LanguageCode

RECIPE_FILE = "langadapt_recipe.yaml"
"""The resolved recipe the export writes beside the weights (machine paths stripped): how the
model was made, and where `langadapt eval` of the folder finds its run and scoring settings."""


class ExportConfig(Config):
    """What the export stage writes, how it checks it, and where it pushes."""

    enabled: bool = True
    """Write the exported model folder (run_dir/export/model)."""
    push_to_hub: bool = False
    """Upload the exported folder to the Hugging Face Hub (needs HF_TOKEN and network)."""
    repo_id: str | None = None
    """Hub repository, e.g. 'my-org/normistral-7b-warm'; required when push_to_hub is true."""
    private: bool = True
    """Create the Hub repository as private (make it public yourself after checking the card)."""
    license: str | None = None
    """Hub licence id for the card (e.g. apache-2.0, cc-by-sa-4.0); required when a trained source's licence
    is copyleft, share-alike or non-commercial."""
    languages: list[LanguageCode] = []
    """ISO codes for the card metadata; empty = the target languages of the recipe's sources."""
    description: str = ""
    """Free text placed at the top of the model card."""
    dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"
    """Dtype of the exported weights: bfloat16, float16 or float32."""
    max_shard_size: str = "5GB"
    """Largest safetensors file; bigger models are split into shards plus an index (the Hub's usual 5GB)."""
    prompt: str | None = None
    """Prompt of the smoke generation checked before the export is complete; None: a default for the card's first language."""
