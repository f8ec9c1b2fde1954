"""Save a tokenizer folder that states what its pipeline does, for every reader of the folder.

transformers 5 runs the post-processor of `tokenizer.json` and drops `add_bos_token` /
`add_eos_token` from `tokenizer_config.json` when it saves (and ignores them when it loads a
folder that has a tokenizer.json). Other readers of the same folder do not: transformers 4's
Llama tokenizers rebuild their post-processor from these flags (a missing flag means their
default, BOS on), and converters and servers (llama.cpp, vLLM, TGI) read them to decide whether
to prepend BOS. A folder loaded and saved by transformers 5 (each stage of a run does that) would
lose them. So every save of the run's tokenizer writes them back, measured from the
post-processor itself: they cannot disagree with what encoding does. `legacy` (the Llama
tokenizers' dummy-prefix convention, which transformers also does not keep on every class) is
written wherever the tokenizer carries it, and `special_tokens_map.json` names the roles for the
readers that still look there.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from langadapt.errors import LangadaptError

log = logging.getLogger("langadapt")
PROBE = "a b"
"""Any text that encodes to at least one ordinary token."""
SPECIAL_TOKENS_MAP = "special_tokens_map.json"


def special_token_flags(tokenizer: Any) -> dict[str, bool]:
    """`add_bos_token` / `add_eos_token` as the tokenizer's post-processor actually behaves on one text.

    Empty when the post-processor adds something these two flags cannot describe (another token
    than the BOS/EOS roles, or more than one at either end): writing any value would then make a
    reader that trusts the flags rebuild a different post-processor."""
    backend = tokenizer.backend_tokenizer
    plain = backend.encode(PROBE, add_special_tokens=False).ids
    full = backend.encode(PROBE, add_special_tokens=True).ids
    start = next((i for i in range(len(full) - len(plain) + 1) if full[i:i + len(plain)] == plain), None)
    if not plain or start is None:
        return {}
    prefix, suffix = full[:start], full[start + len(plain):]
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    if prefix not in ([], [bos]) or suffix not in ([], [eos]):
        return {}
    return {"add_bos_token": bool(prefix), "add_eos_token": bool(suffix)}


def convention_flags(tokenizer: Any) -> dict[str, Any]:
    """The flags beside the pipeline that a tokenizer carries (`legacy`), as given when it was built or loaded."""
    legacy = tokenizer.init_kwargs.get("legacy", getattr(tokenizer, "legacy", None))
    return {} if legacy is None else {"legacy": bool(legacy)}


def check_written_flags(folder: Path | str, tokenizer: Any, what: str = "base_model.path") -> None:
    """Warn when a folder's tokenizer_config.json says otherwise than its post-processor does.

    transformers 5 follows the post-processor, transformers 4 and converters the flags: such a
    base already encodes differently depending on the reader, and a tokenizer made from it
    follows the post-processor (and says so in its own flags)."""
    try:
        written = json.loads((Path(folder) / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    for flag, value in special_token_flags(tokenizer).items():
        if flag in written and bool(written[flag]) != value:
            log.warning("%s %s: tokenizer_config.json says %s=%s, but tokenizer.json's post-processor %s; "
                        "followed the post-processor, as transformers 5 does", what, folder, flag,
                        written[flag], "adds it" if value else "does not add it")


def save_tokenizer(tokenizer: Any, folder: Path | str) -> None:
    """`save_pretrained`, then the flags and the special-token map that transformers 5 leaves out."""
    folder = Path(folder)
    tokenizer.save_pretrained(str(folder))
    path = folder / "tokenizer_config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise LangadaptError(f"{path}: transformers did not write a readable tokenizer config ({exc})") from None
    config.update(convention_flags(tokenizer))
    config.update(special_token_flags(tokenizer))
    path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    roles = json.dumps(dict(tokenizer.special_tokens_map), indent=2, ensure_ascii=False, default=str)
    (folder / SPECIAL_TOKENS_MAP).write_text(roles + "\n", encoding="utf-8")
