"""Export settings: the Hugging Face folder, its model card, and the optional Hub push."""

from __future__ import annotations

from langadapt.config_base import Config


class ExportConfig(Config):
    """What the export stage writes and where it pushes."""

    enabled: bool = True
    """Write the exported model folder (run_dir/export/model)."""
    push_to_hub: bool = False
    """Upload the exported folder to the Hugging Face Hub (needs HF_TOKEN and network)."""
    repo_id: str | None = None
    """Hub repository, e.g. 'my-org/normistral-7b-warm'; required when push_to_hub is true."""
    private: bool = True
    """Create the Hub repository as private (make it public yourself after checking the card)."""
    license: str = "apache-2.0"
    """Licence identifier written into the model card metadata."""
    languages: list[str] = []
    """ISO codes for the card metadata; empty = the target languages of the recipe's sources."""
    description: str = ""
    """Free text placed at the top of the model card."""
    dtype: str = "bfloat16"
    """Dtype of the exported weights: bfloat16, float16 or float32."""
