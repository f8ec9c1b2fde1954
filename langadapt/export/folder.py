"""The exported folder: weights (sharded safetensors with an index when large), config, generation
config and a tokenizer a user can rely on (its real context length, the base's chat template).

Everything is written by transformers' own `save_pretrained`; what is added by hand is only what
`save_pretrained` cannot know: the context length the tokenizer should announce (a tokenizer
trained on its own has none, so transformers writes 1e30), whether the base model's chat
template still makes sense for the new vocabulary, the flags and special-token map transformers 5
no longer writes (`tokenizer.saving`), and the base's own vocabulary files (tokenizer.model,
tekken.json) as far as they can agree with the run's vocabulary (`export.vocabulary`).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch

from langadapt.errors import LangadaptError
from langadapt.export.vocabulary import carry_vocabulary_files
from langadapt.tokenizer.saving import save_tokenizer

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}

log = logging.getLogger("langadapt")


def context_length(config: Any) -> int | None:
    """The longest input the model was built for (its position table), as its config names it."""
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def base_tokenizer_or_none(base_folder: str | None) -> Any | None:
    """The base model's tokenizer, or None (scratch runs; a base that is only a config)."""
    if not base_folder:
        return None
    from langadapt.tokenizer.loading import load_tokenizer

    try:
        return load_tokenizer(base_folder)
    except LangadaptError:  # a base without a tokenizer (a bare config): nothing to carry
        return None


def carried_chat_template(base: Any | None, vocab: dict[str, int]) -> str | dict | None:
    """The base tokenizer's chat template, if it has one and every special token it names exists
    in the new vocabulary as one token (else the template would split them into pieces: dropped,
    with a warning saying which)."""
    template = base.chat_template if base is not None else None
    if not template:
        return None
    text = template if isinstance(template, str) else "\n".join(template.values())
    named = {tok.content for tok in base.added_tokens_decoder.values() if tok.content in text}
    missing = sorted(named - set(vocab))
    if missing:
        log.warning("export: the base's chat template is not carried over: it names %s, which the "
                    "new vocabulary lacks", ", ".join(missing))
        return None
    return template


def backend_json(tokenizer: Any | None) -> dict | None:
    """A fast tokenizer's tokenizer.json as a dict (None for no tokenizer)."""
    return None if tokenizer is None else json.loads(tokenizer.backend_tokenizer.to_str())


def _same_mode_as_the_folder(folder: Path) -> None:
    """The weights get the mode every other file of the folder got (the umask's: 0644 usually).

    safetensors (0.8) writes its files 0600 through a private temporary file, so an exported folder
    shared with a group or copied to a Hub upload node had readable configs and unreadable weights."""
    mode = (folder / "config.json").stat().st_mode & 0o777
    for weights in folder.glob("*.safetensors"):
        weights.chmod(mode)


def _portable_tokenizer_config(folder: Path) -> None:
    """transformers 5 names a tokenizer that is only a tokenizer.json `TokenizersBackend`, a class
    transformers 4 lacks (AutoTokenizer fails); `PreTrainedTokenizerFast` is the same tokenizer
    under the name both load. transformers 4's class also returns token_type_ids unless told the
    model's inputs, which a Llama's forward() refuses. `is_local` and `local_files_only` are how this
    process loaded the run's tokenizer (transformers 5 saves them): a published folder says nothing
    of where it was loaded from."""
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text())
    loaded_as = {key: config.pop(key) for key in ("is_local", "local_files_only") if key in config}
    if config.get("tokenizer_class") == "TokenizersBackend":
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
        config.setdefault("model_input_names", ["input_ids", "attention_mask"])
    elif not loaded_as:
        return
    path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")


def _portable_model_config(folder: Path) -> None:
    """transformers 5 writes RoPE settings as `rope_parameters` and the dtype as `dtype`;
    transformers 4 reads `rope_theta`/`rope_scaling`/`torch_dtype` and silently falls back to
    its defaults (rope_theta 10000: wrong logits for a Llama-3 style base). Both spellings are
    written; transformers 5 reads its own."""
    path = folder / "config.json"
    config = json.loads(path.read_text())
    rope = config.get("rope_parameters")
    if isinstance(rope, dict) and "rope_theta" in rope:
        config.setdefault("rope_theta", rope["rope_theta"])
        if rope.get("rope_type", "default") != "default":
            config.setdefault("rope_scaling", rope)
    if "dtype" in config:
        config.setdefault("torch_dtype", config["dtype"])
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def write_model_folder(model: torch.nn.Module, tokenizer_source: Path, base_folder: str | None,
                       folder: Path, dtype: str, max_shard_size: str) -> dict[str, Any]:
    """Save `model` (cast to `dtype`) and the run's tokenizer into `folder`; returns what was set."""
    from transformers import GenerationConfig

    from langadapt.tokenizer.loading import load_tokenizer

    tokenizer = load_tokenizer(tokenizer_source)
    base = base_tokenizer_or_none(base_folder)
    length = context_length(model.config)
    if length is not None:
        tokenizer.model_max_length = length
    template = carried_chat_template(base, tokenizer.get_vocab())
    if template is not None and not tokenizer.chat_template:
        tokenizer.chat_template = template
    generation = model.generation_config or GenerationConfig.from_model_config(model.config)
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):  # the new vocabulary's ids
        value = getattr(tokenizer, key)
        if value is not None:
            setattr(generation, key, value)
            setattr(model.config, key, value)
    model.generation_config = generation
    model.to(DTYPES[dtype]).save_pretrained(folder, max_shard_size=max_shard_size)
    save_tokenizer(tokenizer, folder)
    carried = carry_vocabulary_files(backend_json(tokenizer), backend_json(base), base_folder, folder)
    _portable_tokenizer_config(folder)
    _portable_model_config(folder)
    _same_mode_as_the_folder(folder)
    shards = sorted(p.name for p in folder.glob("*.safetensors"))
    return {"model_max_length": length, "chat_template": template is not None, "shards": len(shards),
            "index": (folder / "model.safetensors.index.json").is_file(), **carried}
