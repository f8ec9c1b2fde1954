"""A user's model folder read from its headers alone, no tensor loaded and no torch: are its
safetensors weights whole, and do its parts (config.json, the embedding and head tensors,
tokenizer.json, the special ids) agree with each other.

The preflight check runs these on the base model before any stage. `model_folder_problem` is the
whole check of one folder (files there, weights whole, parts in agreement, a tokenizer to load):
`run.base_model` runs it on every base folder it resolves (for `langadapt run` and `export`),
`langadapt eval` on every model it scores, each before torch is imported. `tokenizer_id_count` is
the one count of the ids a tokenizer.json uses (the tokenizer's extension, the export's vocabulary
and the preflight's data checks call it).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from langadapt.errors import LangadaptError
from langadapt.inputs.compression import input_problem
from langadapt.inputs.files import irregular_files
from langadapt.inputs.text import read_input_json

SAFETENSORS, SAFETENSORS_INDEX = "model.safetensors", "model.safetensors.index.json"
"""The weights file names Hugging Face writes and loads (`huggingface_hub.constants`
SAFETENSORS_SINGLE_FILE / SAFETENSORS_INDEX_FILE, which a test compares), spelled here so that
reading a folder or a run's layout does not import huggingface_hub (`langadapt plan`, `--dry-run`)."""
WEIGHT_FILES = (SAFETENSORS, SAFETENSORS_INDEX, "pytorch_model.bin", "pytorch_model.bin.index.json")
"""What transformers loads a model's weights from (the sharded forms beside each single file)."""
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tekken.json", "vocab.json")
"""The files a tokenizer loads from (vocab.json with its merges.txt); a folder with none of them
ends in transformers' "install sentencepiece or tiktoken" after seconds of imports."""


def is_model_folder(path: Path) -> bool:
    """A Hugging Face model folder (config.json beside whatever else), as opposed to a run directory,
    a checkpoint or a missing path: the one test of what a stage, `langadapt eval` or export treats as
    one model. `model_folder_problem` says whether such a folder also loads."""
    return (path / "config.json").is_file()


def weights_problem(folder: Path) -> str | None:
    """Why the safetensors weights in `folder` cannot be loaded, from headers and file sizes alone.

    A `model.safetensors` cut short by an interrupted copy passes every existence check and fails
    only when a stage loads it, after data and tokenizer have run. `safe_open` parses the header
    and requires that the header length plus the largest `data_offsets` end is the file size; no
    tensor is read. A sharded model's index must name shards that all exist and pass the same
    check. None when fine, or when the folder has no safetensors weights (`pytorch_model.bin`)."""
    single, index = folder / SAFETENSORS, folder / SAFETENSORS_INDEX
    if single.exists():
        return _safetensors_problem(single)
    if index.exists():
        return _index_problem(index)
    return None


def _index_problem(index: Path) -> str | None:
    try:
        weight_map = read_input_json(index, "the safetensors index")["weight_map"]
        shards = sorted(set(weight_map.values()))
    except LangadaptError as exc:
        return str(exc).removeprefix(f"{index}: ")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"{index} is not a safetensors index (no weight_map of tensor -> shard file: {type(exc).__name__})"
    if not shards:
        return f"{index} names no shard files"
    missing = [shard for shard in shards if not (index.parent / shard).exists()]
    if missing:
        return f"{index} names shard {missing[0]}, which is missing" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
    return next((p for p in (_safetensors_problem(index.parent / s) for s in shards) if p), None)


def _safetensors_problem(path: Path) -> str | None:
    if problem := input_problem(path):
        return problem
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="np"):
            pass
    except Exception as exc:  # noqa: BLE001 - SafetensorError (a truncated or garbled header), OSError
        return f"{path} is truncated or corrupt ({' '.join(str(exc).split())}): copy or download it again"
    return None


EMBEDDING_NAMES = (
    "model.embed_tokens.weight",  # Llama, Mistral, Qwen, Gemma, Phi-3, OLMo, ...
    "model.language_model.embed_tokens.weight", "language_model.model.embed_tokens.weight",  # Gemma 3, Llava
    "model.decoder.embed_tokens.weight",  # OPT
    "transformer.wte.weight", "wte.weight",  # GPT-2, GPT-J, StarCoder (with and without the prefix)
    "gpt_neox.embed_in.weight",  # Pythia, GPT-NeoX
    "transformer.word_embeddings.weight", "word_embeddings.weight",  # BLOOM, Falcon
    "model.tok_embeddings.weight",  # InternLM2
    "embed_tokens.weight",  # a bare decoder saved without its LM head
)
"""Where the input embedding matrix lives in a Hugging Face checkpoint, per architecture family.
A folder naming none of them is not checked (`embedding_rows` returns None): an unknown layout is
the loader's to judge, not a reason to refuse."""


HEAD_NAMES = ("lm_head.weight", "embed_out.weight", "output.weight", "model.lm_head.weight")
"""Where a separate output head lives (Llama/Mistral/Qwen/Gemma, GPT-NeoX, InternLM2, a few wrappers)."""
COMPARED_ROWS = 16
"""Rows of a stored head compared with the embedding when the config ties them (read by slice: bytes)."""


def _tensor_files(folder: Path) -> dict[str, Path] | None:
    """Tensor name -> the safetensors file that holds it, from the index or the single file's header
    (no tensor is read); None when the folder has no safetensors weights."""
    from safetensors import safe_open

    single, index = folder / SAFETENSORS, folder / SAFETENSORS_INDEX
    if single.exists():
        with safe_open(str(single), framework="np") as f:
            return {name: single for name in f.keys()}  # noqa: SIM118 - a safe_open handle is not a dict
    if index.exists():
        weight_map = read_input_json(index, "the safetensors index")["weight_map"]
        return {name: folder / file for name, file in weight_map.items()}
    return None


def _rows(path: Path, name: str, count: int | None = None) -> Any:
    """The shape of tensor `name` (count None) or its first `count` rows (a numpy array)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="np") as f:
        piece = f.get_slice(name)
        return piece.get_shape() if count is None else piece[:count]


def embedding_rows(folder: Path) -> tuple[str, int] | None:
    """(tensor name, rows) of the input embedding, from the safetensors header alone (no tensor is
    read): `model.safetensors`, or the shard the index names for it. None when the folder has no
    safetensors weights or names no tensor of `EMBEDDING_NAMES`."""
    try:
        files = _tensor_files(folder) or {}
        name = next((n for n in EMBEDDING_NAMES if n in files), None)
        return None if name is None else (name, int(_rows(files[name], name)[0]))
    except Exception:  # noqa: BLE001 - an unreadable header or index: `weights_problem` says what is wrong
        return None


def _head_problem(folder: Path, config: dict[str, Any], embedding: str) -> str | None:
    """A config's `tie_word_embeddings` that the stored tensors contradict. `false` with no head
    tensor: transformers starts the head from random numbers. `true` with a stored head that is not
    the embedding (its first rows differ): transformers ties the head and drops the stored one, so
    the model adapted is not the model given. Only an explicit setting is judged (defaults differ
    by model type)."""
    tied = next((section["tie_word_embeddings"] for section in (config, config.get("text_config"))
                 if isinstance(section, dict) and isinstance(section.get("tie_word_embeddings"), bool)), None)
    try:
        files = _tensor_files(folder) or {}
        head = next((n for n in HEAD_NAMES if n in files), None)
        if tied is False and files and head is None:
            return (f"{folder}/config.json sets tie_word_embeddings: false but the weights hold no output head "
                    f"({' / '.join(HEAD_NAMES[:2])}): transformers would start it from random numbers; set it to "
                    "true if the model shares its input embeddings")
        if tied is True and head is not None:
            import numpy as np

            stored, shared = (_rows(files[n], n, COMPARED_ROWS) for n in (head, embedding))
            if not np.array_equal(stored, shared):
                return (f"{folder}/config.json sets tie_word_embeddings: true but the weights hold a separate {head} "
                        f"that differs from {embedding}: transformers would drop it and use the embeddings as the "
                        "head; set tie_word_embeddings: false to keep the model's own head")
    except Exception:  # noqa: BLE001 - an unreadable header or index: `weights_problem` says what is wrong
        return None
    return None


def _special_id_problem(folder: Path, config: dict[str, Any], rows: int) -> str | None:
    """A special token id of config.json (bos/eos/pad; eos may be a list) past the embedding rows:
    generation and packing would index a row that does not exist."""
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        values = config.get(key)
        for value in values if isinstance(values, list) else [values]:
            if isinstance(value, int) and not isinstance(value, bool) and not 0 <= value < rows:
                return (f"{folder}/config.json has {key} {value:,}, outside the weights' {rows:,} embedding rows: "
                        "config and weights are from different models, or the id is a typo")
    return None


def config_vocab_size(config: dict[str, Any]) -> int | None:
    """`vocab_size` of a config.json, or of its `text_config` (multimodal wrappers keep it there)."""
    for section in (config, config.get("text_config")):
        if isinstance(section, dict) and isinstance(section.get("vocab_size"), int):
            return int(section["vocab_size"])
    return None


def tokenizer_id_count(tokenizer: dict[str, Any]) -> int | None:
    """One past the highest token id of a tokenizer.json (its vocabulary and its added tokens), the
    number of rows it needs; None when it has no vocabulary to count (a stub, an unknown model type)."""
    model = tokenizer.get("model")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if isinstance(vocab, dict):
        ids = [v for v in vocab.values() if isinstance(v, int)]
    elif isinstance(vocab, list):  # Unigram: [[piece, score], ...], ids by position
        ids = [len(vocab) - 1] if vocab else []
    else:
        return None
    added = tokenizer.get("added_tokens")
    if isinstance(added, list):
        ids += [t["id"] for t in added if isinstance(t, dict) and isinstance(t.get("id"), int)]
    return max(ids) + 1 if ids else None


def _read_json_quietly(path: Path) -> dict[str, Any] | None:
    try:
        value = read_input_json(path, path.name)
    except LangadaptError:
        return None
    return value if isinstance(value, dict) else None


def parts_problem(folder: Path, config: dict[str, Any] | None = None,
                  tokenizer: dict[str, Any] | None = None) -> str | None:
    """Why the base model's parts disagree with each other, from headers alone, or None.

    A config.json `vocab_size` other than the input embedding's rows passes every existence check
    and fails as a transformers size-mismatch traceback when stage 1 loads the model, after the
    data and tokenizer stages; a tokenizer with ids past the last row fails as an index error
    inside training. Rows beyond the tokenizer are normal (padding to a multiple of 64 or 128).
    `config` and `tokenizer` are the parsed config.json and tokenizer.json where the caller has
    them (the preflight check does); else they are read from `folder`. A folder whose embedding
    tensor has none of the `EMBEDDING_NAMES` is not checked."""
    found = embedding_rows(folder)
    if found is None:
        return None
    name, rows = found
    if config is None:
        config = _read_json_quietly(folder / "config.json")
    vocab_size = config_vocab_size(config) if config else None
    problem = _special_id_problem(folder, config or {}, rows) or _head_problem(folder, config or {}, name)
    if problem is not None:
        return problem
    if vocab_size is not None and vocab_size != rows:
        return (f"{folder}/config.json has vocab_size {vocab_size:,} but the weights' {name} has {rows:,} rows: "
                "config and weights are from different models (or a resized model was saved without its "
                f"config); set vocab_size to {rows:,} if the weights are the right ones")
    if tokenizer is None and (folder / "tokenizer.json").is_file():
        tokenizer = _read_json_quietly(folder / "tokenizer.json")
    needed = tokenizer_id_count(tokenizer) if tokenizer else None
    if needed is not None and needed > rows:
        return (f"{folder}/tokenizer.json has token ids up to {needed - 1:,} but the weights' {name} has only "
                f"{rows:,} rows: ids {rows:,}.. have no embedding; use the tokenizer saved with these "
                "weights (or resize the embeddings and save the model again)")
    return None


def tokenizer_files_problem(folder: Path) -> str | None:
    """Why no tokenizer loads from `folder`, from its file names alone: none of `TOKENIZER_FILES`,
    or only a vocabulary that needs a library (or transformers version) not installed here."""
    present = [name for name in TOKENIZER_FILES if (folder / name).exists()]
    if not present:
        return (f"{folder} has no tokenizer files "
                "(tokenizer.json, tokenizer.model, tekken.json, or vocab.json + merges.txt)")
    if present == ["tokenizer.model"] and importlib.util.find_spec("sentencepiece") is None:
        return (f"{folder} has only a SentencePiece tokenizer.model: "
                "pip install sentencepiece (or save the tokenizer as tokenizer.json)")
    if present == ["tekken.json"] and not _transformers_converts_tekken():
        return (f"{folder} has only a Mistral tekken.json, which this transformers cannot convert: "
                "pip install 'transformers>=5' (or save the tokenizer as tokenizer.json)")
    return None


def _transformers_converts_tekken() -> bool:
    """Whether the installed transformers has its tekken.json converter (5.x), without importing it."""
    spec = importlib.util.find_spec("transformers")
    return spec is not None and spec.origin is not None and (
        Path(spec.origin).parent / "integrations" / "mistral").is_dir()


def model_folder_problem(folder: Path, weights: bool = True, tokenizer: bool = True) -> str | None:
    """Why model folder `folder` cannot be loaded as one model, or None: the one check of a folder a
    user hands over, from file names, JSON and safetensors headers alone (no torch, no tensor read).

    In order: a folder with config.json (a JSON object) and no FIFO or other irregular file among its
    files; with `weights`, weight files that exist (a folder used only for its tokenizer or config
    passes False) and, wherever they exist, are whole (`weights_problem`); with `tokenizer`, a
    tokenizer to load (`tokenizer_files_problem`, and a tokenizer.json that parses); then config,
    weights and tokenizer in agreement (`parts_problem`). Each problem is one line naming the folder
    or its file."""
    if not folder.is_dir():
        return f"{folder}: no such model folder" if not folder.exists() else f"{folder} is a file, not a model folder"
    if irregular := irregular_files(folder):
        return irregular[0]
    if not is_model_folder(folder):
        return f"{folder} has no config.json: not a Hugging Face model folder"
    try:
        config = read_input_json(folder / "config.json", "config.json")
    except LangadaptError as exc:
        return str(exc).removeprefix("config.json: ")
    if not isinstance(config, dict):
        return f"{folder / 'config.json'}: expected a JSON object"
    if weights and not any((folder / name).exists() for name in WEIGHT_FILES):
        return f"{folder} has no weights ({' or '.join(WEIGHT_FILES[::2])})"
    if problem := weights_problem(folder):
        return problem
    parsed = None
    if tokenizer:
        if problem := tokenizer_files_problem(folder):
            return problem
        if (folder / "tokenizer.json").is_file():
            try:
                parsed = read_input_json(folder / "tokenizer.json", "tokenizer.json")
            except LangadaptError as exc:
                return str(exc).removeprefix("tokenizer.json: ")
    return parts_problem(folder, config, parsed if isinstance(parsed, dict) else None)
