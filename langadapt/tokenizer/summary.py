"""What a finished tokenizer stage means for the rest of the run, read from its manifest summary.

Pure and light (no `tokenizers` import): `langadapt plan`, the evaluation report and the model
card all show it, and `plan` must stay fast.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def vocabulary_shortfall(summary: Mapping[str, Any]) -> str | None:
    """One sentence when the tokenizer stage made fewer tokens than `tokenizer.vocab_size` asked for.

    BPE stops when no pair occurs `min_frequency` times any more, so a small corpus cannot fill a
    large vocabulary (the demo's Bokmål gives ~13k tokens whatever is asked). The run goes on with
    the smaller vocabulary (`tokenizer.train.check_reached_size` fails below `min_vocab_fraction`);
    every reader of the run should see that, not only the console.

    An extension (`tokenizer.kind: extend`) is counted by its new tokens only: its base ids were
    kept, not learned, and counting them made 7,583 of 8,192 new tokens on a 32,000-token base
    read as "99% of the asked size". An extension's summary without `base_vocab_size` (written
    before the field existed) gets no share: none can be computed honestly.
    """
    reached, asked = summary.get("vocab_size"), summary.get("vocab_size_requested")
    if not isinstance(reached, int) or not isinstance(asked, int) or reached >= asked:
        return None
    why = "its training text ran out of pairs that occur tokenizer.min_frequency times"
    if summary.get("kind") == "extend":
        kept = summary.get("base_vocab_size")
        if not isinstance(kept, int) or kept >= asked:
            return (f"the extended tokenizer has {reached:,} tokens, fewer than the {asked:,} asked for "
                    f"(tokenizer.vocab_size): {why}")
        return (f"the extension learned {reached - kept:,} of the {asked - kept:,} new tokens asked for "
                f"({(reached - kept) / (asked - kept):.0%}; tokenizer.vocab_size {asked:,} less the base's "
                f"{kept:,}): {why}")
    return (f"the new tokenizer has {reached:,} tokens, {reached / asked:.0%} of the {asked:,} asked for "
            f"(tokenizer.vocab_size): {why}")


def specials_note(summary: Mapping[str, Any]) -> str | None:
    """One sentence when the new tokenizer left out some of the base's special tokens.

    A replacement keeps the specials something names (`tokenizer.keep_specials: used`), or the
    ones `tokenizer.special_tokens` lists; the rest (a base's reserved placeholders) are dropped and
    their ids go to the language. A user who relied on one (a tool-call marker outside the chat
    template) reads here how to bring it back."""
    specials = summary.get("specials") or {}
    dropped, base = specials.get("dropped"), specials.get("base")
    if not isinstance(dropped, int) or not isinstance(base, int) or dropped == 0:
        return None
    examples = ", ".join(specials.get("dropped_examples") or [])
    if specials.get("decided_by") == "special_tokens":
        why, fix = "that tokenizer.special_tokens does not list", "list them there to keep them"
    else:
        why, fix = "that nothing names", "tokenizer.keep_specials=all keeps every one, tokenizer.added_tokens one by name"
    return (f"the new tokenizer keeps {base - dropped:,} of the base's {base:,} special tokens and dropped "
            f"{dropped:,} {why} (e.g. {examples}); {fix}")
