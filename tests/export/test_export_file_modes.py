"""An exported folder is fit to publish: one mode for all its files, no trace of how this machine loaded it.

safetensors 0.8 writes its files 0600 (through a private temporary file); the export folder is what a
user copies to a group share or an upload node, and it had readable configs beside unreadable weights.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from langadapt.export.folder import write_model_folder


def test_every_exported_file_has_the_mode_the_umask_gives(tiny_en_llama: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_en_llama, dtype=torch.float32)
    old = os.umask(0o027)  # a group-shared project: rw-r-----
    try:
        write_model_folder(model, tiny_en_llama, str(tiny_en_llama), tmp_path / "export", "float32", "2GB")
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "export").iterdir() if p.is_file()}
    assert "model.safetensors" in modes
    assert set(modes.values()) == {0o640}, modes


def test_the_exported_tokenizer_config_says_nothing_of_how_this_process_loaded_it(tiny_en_llama: Path,
                                                                                 tmp_path: Path) -> None:
    """transformers 5 saves `is_local: true` and `local_files_only` into tokenizer_config.json."""
    import json

    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_en_llama, dtype=torch.float32)
    write_model_folder(model, tiny_en_llama, str(tiny_en_llama), tmp_path / "export", "float32", "2GB")
    config = json.loads((tmp_path / "export" / "tokenizer_config.json").read_text())
    assert not {"is_local", "local_files_only"} & set(config), config
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
