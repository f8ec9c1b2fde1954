"""Tokenizer families and the conventions a new tokenizer inherits from the base one.

Everything here is `tokenizer.json` components as JSON dicts, the format `tokenizers` itself
reads and writes: inheriting a convention is copying the base's component verbatim, which keeps
whatever options it uses (regex pattern, prefix space, digit splitting, normaliser) without this
module having to understand them. Only the model (vocabulary + merges) is new.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

from langadapt.errors import LangadaptError
from langadapt.recipe.tokenizer import TokenizerConfig
from langadapt.tokenizer.saving import convention_flags
from langadapt.tokenizer.specials import named_tokens, processor_nodes, select_specials

FAMILIES = ("byte_bpe", "sentencepiece_bpe", "unigram")
ROLES = ("bos_token", "eos_token", "pad_token", "unk_token")
SPACE = "\u2581"  # SentencePiece's visible space
BPE_FLAGS = {"dropout": None, "unk_token": None, "continuing_subword_prefix": None, "end_of_word_suffix": None,
             "fuse_unk": False, "byte_fallback": False, "ignore_merges": False}


@dataclass
class Blueprint:
    """What a new tokenizer looks like apart from its learned vocabulary."""

    family: str
    normalizer: dict | None
    pre_tokenizer: dict | None
    post_processor: dict | None
    decoder: dict | None
    specials: list[dict]
    """added_tokens entries (content and flags) in id order; ids are assigned at assembly."""
    roles: dict[str, str | None]
    init_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra `PreTrainedTokenizerFast` arguments inherited from the base (chat template, max length,
    `legacy` when the base's normaliser and pre-tokeniser are kept). Not add_bos_token/add_eos_token:
    given to the constructor they make transformers rebuild the inherited post-processor; they are
    written on save from what the post-processor does (`tokenizer.saving`)."""
    model_flags: dict[str, Any] = field(default_factory=lambda: dict(BPE_FLAGS))
    """BPE options besides vocab and merges (e.g. Llama-3's ignore_merges), inherited when the family matches."""

    @property
    def byte_fallback(self) -> bool:
        return self.family != "byte_bpe"


def blueprint(config: TokenizerConfig, base: Any | None) -> Blueprint:
    """The family and conventions for `config`, inherited from `base` where the config says so."""
    base_json = json.loads(base.backend_tokenizer.to_str()) if base is not None else None
    family = config.kind
    if family == "inherit":
        family = family_of(base_json) if base_json is not None else "byte_bpe"
    if family not in FAMILIES:
        raise LangadaptError(f"tokenizer.kind={config.kind!r} does not train a tokenizer")
    flags = dict(BPE_FLAGS)
    kwargs: dict[str, Any] = {}
    if base_json is not None and family_of(base_json, strict=False) == family:
        parts = {k: copy.deepcopy(base_json.get(k)) for k in ("normalizer", "pre_tokenizer", "decoder")}
        flags.update({k: v for k, v in base_json["model"].items() if k in BPE_FLAGS})
        kwargs.update(convention_flags(base))  # `legacy` names the normaliser/pre-tokeniser copied here
    else:
        parts = default_parts(family)
    specials = _specials(config, base, base_json, family)
    roles = _roles(config, base, family, [s["content"] for s in specials])
    if family == "unigram" and roles["unk_token"] is None:  # Unigram cannot work without one
        position = sum(1 for s in specials if s["special"])
        specials.insert(position, {**_FLAGS, "content": "<unk>", "special": True})
        roles["unk_token"] = "<unk>"
    if base_json is None:
        post = _scratch_post_processor(family, roles["bos_token"])
    else:
        post = _post_processor_for(copy.deepcopy(base_json.get("post_processor")), family)
    if config.split_digits is not None:
        parts["pre_tokenizer"] = with_digit_splitting(parts["pre_tokenizer"], config.split_digits)
    if base is not None:
        kwargs.update(usage_kwargs(base))
    return Blueprint(family, parts["normalizer"], parts["pre_tokenizer"], post, parts["decoder"],
                     specials, roles, kwargs, flags)


def usage_kwargs(base: Any) -> dict[str, Any]:
    """What a tokenizer made from `base` keeps of how the base is used: chat template, length, padding side."""
    kwargs = {"model_max_length": base.model_max_length, "padding_side": base.padding_side}
    if getattr(base, "chat_template", None):
        kwargs["chat_template"] = base.chat_template
    return kwargs


def family_of(tokenizer_json: dict, strict: bool = True) -> str | None:
    """byte_bpe, sentencepiece_bpe or unigram, from a tokenizer.json's model and components."""
    model = tokenizer_json.get("model", {})
    text = json.dumps([tokenizer_json.get(k) for k in ("normalizer", "pre_tokenizer", "decoder")])
    if model.get("type") == "Unigram":
        return "unigram"
    if model.get("type") == "BPE":
        if '"ByteLevel"' in text:
            return "byte_bpe"
        if model.get("byte_fallback") or "Metaspace" in text or SPACE in text:
            return "sentencepiece_bpe"
    if not strict:
        return None
    raise LangadaptError(
        f"tokenizer.kind=inherit: base tokenizer model {model.get('type')!r} is neither byte-level BPE, "
        "SentencePiece-style BPE nor Unigram; set tokenizer.kind explicitly")


def default_parts(family: str) -> dict[str, dict | None]:
    """Normaliser, pre-tokeniser and decoder of a family when nothing is inherited."""
    if family == "byte_bpe":  # GPT-2 regex + byte-to-unicode mapping, as tiny-en-llama / GPT-2
        byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
        return {"normalizer": None, "pre_tokenizer": byte_level, "decoder": dict(byte_level)}
    # Llama-2/Mistral as converted by transformers: ▁ for spaces, ▁ prepended to the first word,
    # bytes for characters outside the vocabulary. split=True cuts at every ▁ (the trainer sees
    # words, and encoding long documents stays linear).
    return {
        "normalizer": None,
        "pre_tokenizer": {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "first", "split": True},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": SPACE}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    }


def with_digit_splitting(pre_tokenizer: dict | None, split: bool) -> dict | None:
    """Add (split=True) or remove (False) an individual-digits step; a regex's own digit rules stay."""
    steps = _steps(pre_tokenizer)
    steps = [s for s in steps if s.get("type") != "Digits"]
    if split:
        steps.append({"type": "Digits", "individual_digits": True})
    if not steps:
        return None
    return steps[0] if len(steps) == 1 else {"type": "Sequence", "pretokenizers": steps}


def training_pre_tokenizer(bp: Blueprint) -> dict:
    """The pre-tokeniser that cuts training text into words; it must always split.

    A SentencePiece-style tokenizer may not split at all at encode time (Metaspace split=False,
    or legacy Llama-2 files where a normaliser writes ▁ and there is no pre-tokeniser): the
    trainer still needs words, cut before each ▁ as SentencePiece does.
    """
    steps = [dict(s) for s in _steps(bp.pre_tokenizer)]
    for step in steps:
        if step.get("type") == "Metaspace":
            step["split"] = True
    if bp.family != "byte_bpe" and not any(s.get("type") in ("Metaspace", "Split") for s in steps):
        steps.insert(0, {"type": "Split", "pattern": {"String": SPACE}, "behavior": "MergedWithNext",
                         "invert": False})
    if not steps:
        raise LangadaptError("tokenizer: the inherited tokenizer has no pre-tokeniser to find words with")
    return steps[0] if len(steps) == 1 else {"type": "Sequence", "pretokenizers": steps}


def remap_post_processor(post: dict | None, ids: dict[str, int]) -> dict | None:
    """The post-processor with every special token's id looked up in the new vocabulary."""
    if post is None:
        return None
    post = copy.deepcopy(post)
    _remap(post, ids)
    return post


def _remap(post: dict, ids: dict[str, int]) -> None:
    for node in processor_nodes(post):
        for entry in (node.get("special_tokens") or {}).values():  # TemplateProcessing
            if isinstance(entry, dict) and "tokens" in entry:
                entry["ids"] = [_id(token, ids) for token in entry["tokens"]]
        for key in ("sep", "cls"):  # BertProcessing / RobertaProcessing: [token, id]
            if isinstance(node.get(key), list) and len(node[key]) == 2:
                node[key] = [node[key][0], _id(node[key][0], ids)]


def _id(token: str, ids: dict[str, int]) -> int:
    if token not in ids:
        raise LangadaptError(f"tokenizer: the post-processor uses {token!r}, which is not a special token")
    return ids[token]


def _steps(pre_tokenizer: dict | None) -> list[dict]:
    if pre_tokenizer is None:
        return []
    if pre_tokenizer.get("type") == "Sequence":
        return [copy.deepcopy(s) for s in pre_tokenizer["pretokenizers"]]
    return [copy.deepcopy(pre_tokenizer)]


_FLAGS = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False}


def _post_processor_for(post: dict | None, family: str) -> dict | None:
    """The base's post-processor minus byte-level offset trimming when the family changes."""
    if family == "byte_bpe" or post is None:
        return post
    if post.get("type") == "ByteLevel":
        return None
    if post.get("type") == "Sequence":
        kept = [p for p in post["processors"] if p.get("type") != "ByteLevel"]
        return None if not kept else kept[0] if len(kept) == 1 else {**post, "processors": kept}
    return post


def _specials(config: TokenizerConfig, base: Any | None, base_json: dict | None, family: str) -> list[dict]:
    """added_tokens entries in id order: inherited (or configured) specials, then added tokens.

    Inherited ones are the base's added tokens in base order, all or only the named ones
    (`tokenizer.keep_specials`, see `tokenizer.specials`); an added token the base already has
    is not repeated."""
    flags = _FLAGS
    if config.special_tokens is not None:
        inherited = {t["content"]: t for t in (base_json or {}).get("added_tokens", [])}
        entries = [{**flags, **inherited.get(c, {}), "content": c, "special": True} for c in config.special_tokens]
    elif base_json is not None:
        entries = [dict(t) for t in sorted(base_json.get("added_tokens", []), key=lambda t: t["id"])]
        entries = select_specials(entries, config.keep_specials, named_tokens(config, base, base_json))
    else:
        names = ["<s>", "</s>", "<pad>"] if family == "byte_bpe" else ["<unk>", "<s>", "</s>", "<pad>"]
        entries = [{**flags, "content": c, "special": True} for c in names]
    present = {entry["content"] for entry in entries}
    entries += [{**flags, "content": c, "special": False, "normalized": True}
                for c in config.added_tokens if c not in present]
    for entry in entries:
        entry.pop("id", None)
    return entries


def _roles(config: TokenizerConfig, base: Any | None, family: str, specials: list[str]) -> dict[str, str | None]:
    scratch = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>",
               "unk_token": None if family == "byte_bpe" else "<unk>"}
    roles: dict[str, str | None] = {}
    for role in ROLES:
        token = getattr(config, role)
        if token is not None and token not in specials:
            raise LangadaptError(f"tokenizer.{role}={token!r} is not among the special tokens {specials}")
        if token is None:  # a default role whose token is not in the special list is left unset
            token = getattr(base, role, None) if base is not None else scratch[role]
            token = token if token in specials else None
        roles[role] = token
    return roles


def _scratch_post_processor(family: str, bos: str | None) -> dict | None:
    """Scratch runs insert BOS in front of every sequence, as Llama does."""
    if bos is None:
        return None
    template = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {bos: {"id": bos, "ids": [0], "tokens": [bos]}}}
    if family != "byte_bpe":
        return template
    byte_level = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}
    return {"type": "Sequence", "processors": [byte_level, template]}
