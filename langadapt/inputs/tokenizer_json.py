"""A model folder's tokenizer.json judged before any stage reads it: the one check every reader of
a base tokenizer.json goes through (the preflight check, `tokenizer.loading.load_tokenizer`).

A corrupted merges list, two tokens on one id or a merge naming a token the vocabulary lacks passed
every existence check and ended as a traceback in the tokenizer stage (the `tokenizers` loader
raises a bare `Exception`; two tokens on one id it accepts, and one of them silently loses its
row). Here the vocabulary and merges are checked entry by entry, so the line names the entry, and
then the file is loaded by the `tokenizers` library itself (light: no torch, no transformers), so
whatever else its loader refuses is refused here as one line naming the file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

SHOWN_CHARS = 60
"""A bad entry is quoted up to this many characters."""
LIBRARY_MESSAGE_CHARS = 200
"""The `tokenizers` loader's own message is shortened to this many characters."""
ENTRY_DEPTH = 3
"""How deep a refusal of the library is located: `model.merges[12]`, `pre_tokenizer.pretokenizers[1]`."""
_POSITION = re.compile(r" at line 1 column (\d+)$")
"""serde's position in the one-line text the library was given (`json.dumps`), not in the user's file:
turned into the entry it falls in."""


def tokenizer_json_problem(path: Path, data: Any) -> str | None:
    """Why the tokenizer.json at `path` (parsed: `data`) cannot be loaded, as one line that starts
    with the file and names the entry (`/x/tokenizer.json: model.merges[12]: 'abc' is not a pair of
    tokens`), or None. The callers add their recipe key (`base_model.path`)."""
    if not isinstance(data, dict):
        return f"{path}: expected a JSON object, found {type(data).__name__}"
    problem = _model_problem(data.get("model")) or _library_problem(data)
    return None if problem is None else f"{path}: {problem}"


def _model_problem(model: Any) -> str | None:
    """The vocabulary's ids and the merges, entry by entry (the shapes the library would refuse as a
    whole, or accept wrongly); anything else is left to `_library_problem`."""
    if not isinstance(model, dict):
        return None
    vocab = model.get("vocab")
    if isinstance(vocab, dict) and (problem := _vocab_problem(vocab)):
        return problem
    if "merges" in model and model.get("type", "BPE") == "BPE":
        prefix = model.get("continuing_subword_prefix")
        return _merges_problem(model["merges"], vocab if isinstance(vocab, dict) else None,
                               prefix if isinstance(prefix, str) else "")
    return None


def _vocab_problem(vocab: dict[str, Any]) -> str | None:
    """Every token an id of its own (a WordPiece, WordLevel or BPE vocabulary: token -> id)."""
    owner: dict[int, str] = {}
    for token, token_id in vocab.items():
        if not isinstance(token_id, int) or isinstance(token_id, bool) or token_id < 0:
            return f"model.vocab[{_show(token)}]: {_show(token_id)} is not a token id (an integer >= 0)"
        if token_id in owner:
            return (f"model.vocab: {_show(owner[token_id])} and {_show(token)} both have id {token_id}: "
                    "one of them would have no row of its own")
        owner[token_id] = token
    return None


def _merges_problem(merges: Any, vocab: dict[str, Any] | None, prefix: str) -> str | None:
    """Merges as `tokenizers` writes them: all "a b" strings (one space between the two tokens;
    tokenizers < 0.20) or all [a, b] pairs; both tokens, and the token they make, in the vocabulary
    (the second token without the `continuing_subword_prefix` it must start with, when there is one)."""
    if not isinstance(merges, list):
        return f"model.merges: expected a list of merges, found {type(merges).__name__}"
    form = None
    for i, entry in enumerate(merges):
        pair = _pair(entry)
        if pair is None:
            return f"model.merges[{i}]: {_show(entry)} is not a pair of tokens (\"a b\" or [\"a\", \"b\"])"
        here = "string" if isinstance(entry, str) else "list"
        if form is None:
            form = here
        elif here != form:
            return (f"model.merges[{i}]: {_show(entry)} is a {here} among {form}s (model.merges[0] is "
                    f"{_show(merges[0])}): a tokenizer.json writes all its merges in one form")
        if vocab is None:
            continue
        left, right = pair
        for token in pair:
            if token not in vocab:
                return f"model.merges[{i}]: {_show(token)} is not in model.vocab"
        if not right.startswith(prefix):  # the library cuts len(prefix) bytes off it regardless (or panics)
            return f"model.merges[{i}]: {_show(right)} does not start with continuing_subword_prefix {_show(prefix)}"
        if (merged := left + right[len(prefix):]) not in vocab:
            return f"model.merges[{i}]: the token it makes, {_show(merged)}, is not in model.vocab"
    return None


def _pair(entry: Any) -> tuple[str, str] | None:
    if isinstance(entry, str):
        parts = entry.split(" ")
        return (parts[0], parts[1]) if len(parts) == 2 else None
    if isinstance(entry, list) and len(entry) == 2 and all(isinstance(token, str) for token in entry):
        return entry[0], entry[1]
    return None


def _library_problem(data: dict[str, Any]) -> str | None:
    """What the `tokenizers` loader refuses (an unknown pre-tokeniser, a missing field ...), its
    message on one line, with the entry it stopped at. Its errors are bare `Exception`s, and a Rust
    panic is a `BaseException`."""
    from tokenizers import Tokenizer

    try:
        Tokenizer.from_str(json.dumps(data))
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - see the docstring: the library's refusal, whatever its class
        message = " ".join(str(exc).split())
        position = _POSITION.search(message)
        entry = _entry_at(data, int(position[1])) if position else None
        message = _POSITION.sub("", message) or type(exc).__name__
        if len(message) > LIBRARY_MESSAGE_CHARS:
            message = message[:LIBRARY_MESSAGE_CHARS - 3] + "..."
        return f"{entry + ': ' if entry else ''}the tokenizers library cannot load it ({message})"
    return None


def _entry_at(data: dict[str, Any], column: int) -> str | None:
    """The innermost entry (`pre_tokenizer`, `added_tokens[3]`, `model.merges[12]`) whose text holds
    `column` of `json.dumps(data)` (one line: serde's 1-based column of where it stopped), or None."""
    spans: list[tuple[int, int, str]] = []
    size = 0

    def write(value: Any, name: str, depth: int) -> None:  # json.dumps's text, piece by piece
        nonlocal size
        start = size
        if depth and isinstance(value, (dict, list)):
            items = value.items() if isinstance(value, dict) else enumerate(value)
            size += 1
            for n, (key, item) in enumerate(items):
                size += 2 * bool(n)
                if isinstance(value, dict):
                    size += len(json.dumps(key)) + 2
                    write(item, f"{name}.{key}" if name else key, depth - 1)
                else:
                    write(item, f"{name}[{key}]", depth - 1)
            size += 1
        else:
            size += len(json.dumps(value))
        if name:
            spans.append((start + 1, size, name))

    write(data, "", ENTRY_DEPTH)
    inside = [(end - start, name) for start, end, name in spans if start <= column <= end]
    return min(inside)[1] if inside else None


def _show(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= SHOWN_CHARS else shown[:SHOWN_CHARS - 3] + "..."
