"""An exported folder's files all get one mode: the weights are not private while the configs are shared.

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
