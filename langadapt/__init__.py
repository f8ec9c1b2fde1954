"""langadapt: adapt a pretrained LLM to a low-resource language by continual pretraining.

The library's entry points, importable from here (each is documented where it lives):

    train_tokenizer, TokenizerConfig, tokenizer_metrics     a tokenizer for the language
    transfer_embeddings, build_mapping, EmbeddingConfig     the new vocabulary's rows, initialised
    encode_texts, stream_from_texts, build_stream,          texts / HF datasets -> token shards ->
    PackedStream, PackedIterableDataset                       the packed, resumable stream (and its
                                                              torch IterableDataset for HF Trainer)
    fit, TrainingJob, TrainStageConfig, EngineConfig,       the training loop of both stages, and the
      TrainResult                                             job it runs (resolved once)
    checkpoint_model                                        a checkpoint's weights as a model folder
    bits_per_byte, evaluate_models, load_suite              evaluation
    planning                                                FLOPs, memory, GPU-hours, energy
    load_recipe                                             a recipe YAML, validated (`.recipe`;
                                                              assignments to it are validated too)

Names are imported on first use (PEP 562): `import langadapt` stays cheap, loads neither torch
nor deepspeed and touches no CUDA state (tests/cli/test_library_api.py checks it in a fresh process).
"""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any


def _checkout_version() -> str:
    """pyproject.toml's version for a checkout used without installing (PYTHONPATH, as tests/gpu/setup.sh does)."""
    import tomllib

    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    try:
        return tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["version"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "0+unknown"


try:
    __version__ = version("langadapt")  # one version, pyproject.toml's
except PackageNotFoundError:
    __version__ = _checkout_version()

_EXPORTS = {
    "TokenizerConfig": "langadapt.recipe.tokenizer",
    "train_tokenizer": "langadapt.tokenizer.train",
    "tokenizer_metrics": "langadapt.tokenizer.metrics",
    "EmbeddingConfig": "langadapt.recipe.embeddings",
    "build_mapping": "langadapt.embeddings.mapping",
    "transfer_embeddings": "langadapt.embeddings.transfer",
    "encode_texts": "langadapt.data.texts",
    "stream_from_texts": "langadapt.data.texts",
    "build_stream": "langadapt.data.stream",
    "PackedStream": "langadapt.data.stream",
    "PackedIterableDataset": "langadapt.data.torch_dataset",
    "fit": "langadapt.train.loop",
    "TrainResult": "langadapt.train.loop",
    "TrainingJob": "langadapt.train.job",
    "TrainStageConfig": "langadapt.recipe.train",
    "EngineConfig": "langadapt.recipe.train",
    "checkpoint_model": "langadapt.train.checkpoint",
    "bits_per_byte": "langadapt.evaluation.bpb",
    "evaluate_models": "langadapt.evaluation.evaluate",
    "load_suite": "langadapt.evaluation.suite",
    "load_recipe": "langadapt.recipe.schema",
}
_SUBMODULES = ("planning",)
__all__ = [  # _EXPORTS and _SUBMODULES, spelled out for linters and `from langadapt import *`
    "EmbeddingConfig", "EngineConfig", "PackedIterableDataset", "PackedStream", "TokenizerConfig", "TrainResult",
    "TrainStageConfig", "TrainingJob", "bits_per_byte", "build_mapping", "build_stream", "checkpoint_model",
    "encode_texts", "evaluate_models", "fit", "load_recipe", "load_suite", "planning", "stream_from_texts",
    "tokenizer_metrics", "train_tokenizer", "transfer_embeddings",
]

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ imports on demand
    from langadapt import planning
    from langadapt.data.stream import PackedStream, build_stream
    from langadapt.data.texts import encode_texts, stream_from_texts
    from langadapt.data.torch_dataset import PackedIterableDataset
    from langadapt.embeddings.mapping import build_mapping
    from langadapt.embeddings.transfer import transfer_embeddings
    from langadapt.evaluation.bpb import bits_per_byte
    from langadapt.evaluation.evaluate import evaluate_models
    from langadapt.evaluation.suite import load_suite
    from langadapt.recipe.embeddings import EmbeddingConfig
    from langadapt.recipe.schema import load_recipe
    from langadapt.recipe.tokenizer import TokenizerConfig
    from langadapt.recipe.train import EngineConfig, TrainStageConfig
    from langadapt.tokenizer.metrics import tokenizer_metrics
    from langadapt.tokenizer.train import train_tokenizer
    from langadapt.train.checkpoint import checkpoint_model
    from langadapt.train.job import TrainingJob
    from langadapt.train.loop import TrainResult, fit


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return import_module(f"langadapt.{name}")
    if name not in _EXPORTS:
        raise AttributeError(f"module 'langadapt' has no attribute {name!r}")
    value = getattr(import_module(_EXPORTS[name]), name)
    globals()[name] = value  # resolved once; later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
