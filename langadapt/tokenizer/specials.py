"""Which of a base tokenizer's special tokens a replacement tokenizer keeps (`tokenizer.keep_specials`).

A replacement vocabulary places the base's special tokens at ids 0.. (so embedding transfer maps
them by role and content). Many bases end their vocabulary with placeholders nothing names:
Llama-3 has 256 specials of which 5 are used (`<|begin_of_text|>`, `<|end_of_text|>`, the two
header markers and `<|eot_id|>` of its chat template) and 251 are `<|reserved_special_token_N|>`;
Mistral-Nemo's Tekken reserves 1,000 ids (`<SPECIAL_N>` after a few control tokens), Whisper-style
bases carry 1,608. In an 8,192-token replacement they would take up to a fifth of the ids for
tokens the language never sees. "Used" means NAMED by something that puts the token into a
sequence: a role, the declared extra special tokens, the chat template, the post-processor, or
the recipe itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

ROLES = ("bos_token", "eos_token", "pad_token", "unk_token")


def processor_nodes(node: Any) -> Iterator[dict]:
    """Every dict in a post-processor's JSON tree (a Sequence nests its processors)."""
    if isinstance(node, list):
        for item in node:
            yield from processor_nodes(item)
    elif isinstance(node, dict):
        yield node
        for value in node.values():
            if isinstance(value, (dict, list)):
                yield from processor_nodes(value)


def post_processor_tokens(post: dict | None) -> set[str]:
    """The tokens a post-processor inserts (TemplateProcessing's special tokens, Bert/Roberta's sep and cls)."""
    tokens: set[str] = set()
    for node in processor_nodes(post):
        for entry in (node.get("special_tokens") or {}).values():
            if isinstance(entry, dict):
                tokens.update(entry.get("tokens") or [])
        for key in ("sep", "cls"):
            if isinstance(node.get(key), list) and len(node[key]) == 2:
                tokens.add(node[key][0])
    return tokens


def named_tokens(config: Any, base: Any, base_json: dict) -> set[str]:
    """Every token that a role, the base's declared extra specials, its chat template or post-processor,
    or the recipe (`special_tokens`, `added_tokens`, a role setting) names.

    The chat template is Jinja text: a token is named when its content occurs in it literally (a
    template builds `<|start_header_id|>` from string literals). A false match only keeps a token."""
    named = {getattr(base, role, None) for role in ROLES} | {getattr(config, role) for role in ROLES}
    extra = getattr(base, "extra_special_tokens", None) or []  # transformers 5's additional_special_tokens
    named.update(extra.values() if isinstance(extra, dict) else extra)
    named.update(post_processor_tokens(base_json.get("post_processor")))
    named.update(config.special_tokens or [])
    named.update(config.added_tokens)
    template = getattr(base, "chat_template", None) or ""  # a str, or named templates (a dict)
    text = template if isinstance(template, str) else json.dumps(template, ensure_ascii=False)
    named.update(t["content"] for t in base_json.get("added_tokens", []) if t["content"] in text)
    return {str(t) for t in named if t}


def select_specials(entries: list[dict], keep: str, named: set[str]) -> list[dict]:
    """The base's added-token entries that a replacement keeps: all of them, or those `named` (in base order)."""
    return entries if keep == "all" else [e for e in entries if e["content"] in named]


def specials_report(config: Any, base: Any | None, tokenizer: Any) -> dict[str, Any]:
    """How many of the base's added tokens the new tokenizer kept and dropped, and which setting
    decided it (JSON-able, for the stage summary and metrics.json); a few dropped ones are named."""
    if base is None:
        return {}
    if config.kind in ("extend", "keep_base"):
        decided_by = f"kind {config.kind}"  # every base id stays
    else:
        decided_by = "special_tokens" if config.special_tokens is not None else f"keep_specials {config.keep_specials}"
    kept_contents = {t.content for t in tokenizer.added_tokens_decoder.values()}
    base_contents = [t.content for _, t in sorted(base.added_tokens_decoder.items())]
    dropped = [c for c in base_contents if c not in kept_contents]
    return {"decided_by": decided_by, "base": len(base_contents), "kept": len(base_contents) - len(dropped),
            "dropped": len(dropped), "dropped_examples": dropped[:3]}
