"""A Llama-3-style base tokenizer: byte-level BPE whose vocabulary ends with 256 special tokens.

Llama-3 places 256 specials after its 128,000 byte-level BPE tokens: `<|begin_of_text|>`,
`<|end_of_text|>`, reserved 0-3, the chat header markers, reserved 4, `<|eot_id|>`, then reserved
5-250. Its post-processor prepends `<|begin_of_text|>`; the chat template names the header markers
and `<|eot_id|>`. Only those five are used; the 251 reserved ones are placeholders. Used by
tests/tokenizer/test_specials.py (on a small BPE) and benchmarks/tokenizer_specials.py (on GPT-2's).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"
HEADER = ("<|start_header_id|>", "<|end_header_id|>")
EOT = "<|eot_id|>"
USED = (BOS, EOS, *HEADER, EOT)


def _reserved(i: int) -> str:
    return f"<|reserved_special_token_{i}|>"


LLAMA3_SPECIALS = [BOS, EOS, *map(_reserved, range(4)), *HEADER, _reserved(4), EOT, *map(_reserved, range(5, 251))]
"""Llama-3's 256 special tokens in id order (128000..128255)."""
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")
"""Llama-3-Instruct's chat template (the system-prompt branch left out)."""


def with_llama3_specials(tokenizer_json: dict[str, Any]) -> dict[str, Any]:
    """`tokenizer_json` (a byte-level BPE) with its added tokens replaced by Llama-3's 256 specials,
    placed after the vocabulary, and a post-processor that prepends `<|begin_of_text|>`."""
    spec = json.loads(json.dumps(tokenizer_json))
    vocab = spec["model"]["vocab"]
    for entry in spec.get("added_tokens", []):
        vocab.pop(entry["content"], None)
    spec["model"]["vocab"] = {token: i for i, token in enumerate(sorted(vocab, key=vocab.get))}
    start = len(vocab)
    spec["added_tokens"] = [{"id": start + i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                             "normalized": False, "special": True} for i, c in enumerate(LLAMA3_SPECIALS)]
    bos = {"SpecialToken": {"id": BOS, "type_id": 0}}
    spec["post_processor"] = {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        {"type": "TemplateProcessing", "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
         "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, bos, {"Sequence": {"id": "B", "type_id": 1}}],
         "special_tokens": {BOS: {"id": BOS, "ids": [start], "tokens": [BOS]}}}]}
    return spec


def write_llama3_style_base(tokenizer_json: dict[str, Any], folder: Path) -> Path:
    """A tokenizer folder as Llama-3's Hub repository lays it out (tokenizer.json + tokenizer_config.json)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text(json.dumps(with_llama3_specials(tokenizer_json), ensure_ascii=False))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS,
              "chat_template": CHAT_TEMPLATE, "clean_up_tokenization_spaces": False, "model_max_length": 8192}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return folder
