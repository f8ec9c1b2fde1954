"""Tiny base models that carry REAL vocabularies (../shared/tokenizers), laid out as on the Hub.

The demo's base (tiny-en-llama) is a GPT-2-style byte-level BPE that this project trained itself;
real bases break things it cannot show: byte-fallback pieces, the SentencePiece dummy prefix
(legacy normaliser or Metaspace), Tekken's 1,000 reserved specials and `head_dim` != hidden/heads,
tied input/output matrices, and Hub folders with `tekken.json` beside `tokenizer.json`. Each base
here is the real tokenizer, converted with transformers' own converters and checked against the
reference implementation (`sentencepiece`, `mistral_common`'s Tekkenizer, `tiktoken`), attached to
a small random body of the real architecture family. Used by the real-base test matrix and by
benchmarks/embedding_init.py (which trains the bodies first).
"""

from __future__ import annotations

import copy
import gzip
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SPACE = "\u2581"
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
"""GPT-2's pre-tokenisation regex (tiktoken's `gpt2` encoding)."""
LEGACY_NORMALIZER = {"type": "Sequence", "normalizers": [
    {"type": "Prepend", "prepend": SPACE}, {"type": "Replace", "pattern": {"String": " "}, "content": SPACE}]}
"""Mistral-7B-v0.1's tokenizer.json on the Hub: a normaliser writes the dummy prefix, no pre-tokeniser."""


@dataclass(frozen=True)
class RealBase:
    """One real vocabulary and the body it is attached to."""

    name: str
    tokenizer_file: str
    """File in ../shared/tokenizers."""
    layout: str
    """sp_legacy | sp_metaspace | tekken | tekken_hub | tiktoken_gpt2."""
    model: dict[str, Any]
    """config.json of the tiny body (model_type, vocab, tie, head_dim, rope ...)."""


_BODY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
         "initializer_range": 0.02}
_MISTRAL = {"model_type": "mistral", "architectures": ["MistralForCausalLM"], "vocab_size": 32000,
            "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2, "rope_theta": 10000.0,
            "sliding_window": None, **_BODY}
_NEMO = {**_MISTRAL, "vocab_size": 131072, "head_dim": 32, "rope_theta": 1_000_000.0}  # 32 != 64 / 4
_GPT2_TIED = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 50257,
              "tie_word_embeddings": True, "bos_token_id": 50256, "eos_token_id": 50256,
              "rope_theta": 500000.0, **_BODY}

BASES: dict[str, RealBase] = {b.name: b for b in (
    RealBase("mistral-sp-legacy", "mistral-7b-v0.1.tokenizer.model", "sp_legacy", _MISTRAL),
    RealBase("mistral-sp-metaspace", "mistral-7b-v0.1.tokenizer.model", "sp_metaspace", _MISTRAL),
    RealBase("nemo-tekken", "mistral-nemo-tekken_240718.json.gz", "tekken", _NEMO),
    RealBase("nemo-tekken-hub", "mistral-nemo-tekken_240718.json.gz", "tekken_hub", _NEMO),
    RealBase("gpt2-tied", "gpt2.tiktoken", "tiktoken_gpt2", _GPT2_TIED),
)}


def _sentencepiece_tokenizer(source: Path, folder: Path, legacy: bool) -> None:
    """tokenizer.model converted by transformers (Metaspace); the legacy form rewritten as on the Hub."""
    from transformers import AutoTokenizer

    shutil.copy(source, folder / "tokenizer.model")
    config = {"tokenizer_class": "LlamaTokenizer", "legacy": legacy, "add_bos_token": True,
              "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
              "clean_up_tokenization_spaces": False, "model_max_length": 32768}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    spec = json.loads(AutoTokenizer.from_pretrained(folder).backend_tokenizer.to_str())
    if legacy:
        spec["normalizer"], spec["pre_tokenizer"] = copy.deepcopy(LEGACY_NORMALIZER), None
    (folder / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False))
    (folder / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, indent=2))


def _tekken_tokenizer(source: Path, folder: Path, hub_layout: bool) -> None:
    """tekken.json converted by transformers; BOS added as the Hub's tokenizer.json does."""
    from transformers.integrations.mistral import convert_tekken_tokenizer

    tekken = folder / "tekken.json"
    tekken.write_bytes(gzip.decompress(source.read_bytes()))
    tokenizer = convert_tekken_tokenizer(str(tekken))
    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    bos = {"SpecialToken": {"id": "<s>", "type_id": 0}}
    spec["post_processor"] = {"type": "TemplateProcessing",
                              "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
                              "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, bos,
                                       {"Sequence": {"id": "B", "type_id": 1}}],
                              "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    (folder / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
              "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False,
              "clean_up_tokenization_spaces": False, "model_max_length": 1024000}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    if not hub_layout:
        tekken.unlink()


def _tiktoken_gpt2_tokenizer(source: Path, folder: Path) -> None:
    """GPT-2's ranks through transformers' TikTokenConverter with GPT-2's own regex."""
    from transformers.convert_slow_tokenizer import TikTokenConverter

    eot = "<|endoftext|>"
    tokenizer = TikTokenConverter(vocab_file=str(source), pattern=GPT2_PATTERN, extra_special_tokens=[eot]).converted()
    (folder / "tokenizer.json").write_text(tokenizer.to_str())
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": eot, "eos_token": eot,
              "clean_up_tokenization_spaces": False, "model_max_length": 1024}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))


def build_tokenizer_folder(base: RealBase, shared_dir: Path, folder: Path) -> Path:
    """Write `base`'s tokenizer files into `folder` as its Hub repository lays them out."""
    folder.mkdir(parents=True, exist_ok=True)
    source = shared_dir / "tokenizers" / base.tokenizer_file
    if base.layout in ("sp_legacy", "sp_metaspace"):
        _sentencepiece_tokenizer(source, folder, legacy=base.layout == "sp_legacy")
    elif base.layout in ("tekken", "tekken_hub"):
        _tekken_tokenizer(source, folder, hub_layout=base.layout == "tekken_hub")
    elif base.layout == "tiktoken_gpt2":
        _tiktoken_gpt2_tokenizer(source, folder)
    else:
        raise ValueError(base.layout)
    return folder


def build_base(name: str, shared_dir: Path, folder: Path, seed: int = 0, **overrides: Any) -> Path:
    """A loadable base model folder: the real tokenizer + a small random body (overrides: config keys)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    base = BASES[name]
    build_tokenizer_folder(base, shared_dir, folder)
    spec = {**base.model, **overrides}
    config = AutoConfig.for_model(**spec)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(folder)
    return folder


def reference_ids(base: RealBase, shared_dir: Path, texts: list[str]) -> list[list[int]]:
    """Each text encoded by the reference implementation (no BOS/EOS)."""
    source = shared_dir / "tokenizers" / base.tokenizer_file
    if base.layout.startswith("sp_"):
        import sentencepiece

        processor = sentencepiece.SentencePieceProcessor(model_file=str(source))
        return [processor.encode(t) for t in texts]
    if base.layout.startswith("tekken"):
        import tempfile

        from mistral_common.tokens.tokenizers.tekken import Tekkenizer

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "tekken.json"
            path.write_bytes(gzip.decompress(source.read_bytes()))
            tekken = Tekkenizer.from_file(str(path))
        return [tekken.encode(t, bos=False, eos=False) for t in texts]
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    encoding = tiktoken.Encoding("gpt2", pat_str=GPT2_PATTERN, mergeable_ranks=load_tiktoken_bpe(str(source)),
                                 special_tokens={"<|endoftext|>": 50256})
    return [encoding.encode(t) for t in texts]


def reference_module(base: RealBase) -> str:
    """The Python module the reference encoder needs (for importorskip)."""
    return {"sp": "sentencepiece", "te": "mistral_common", "ti": "tiktoken"}[base.layout[:2]]
