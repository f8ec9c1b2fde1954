"""The one exception type users see.

Everything the user can fix (a bad recipe, a missing file, an empty corpus) is raised as a
`LangadaptError` with a one-line message that says what is wrong and where (file, key, line).
The CLI prints it as a single line and exits with `EXIT_USER_ERROR`; anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations

import re
from typing import Any

EXIT_USER_ERROR = 2
"""The exit status of a command refused for something the user can fix (also `run --dry-run`'s
when it found a problem)."""

Key = tuple[Any, ...]
"""A recipe key as its path parts: ('data', 'sources', 0, 'path') is `data.sources[0].path`."""

_DOTTED_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def dotted(loc: Key) -> str:
    """('data', 'sources', 0, 'path') -> 'data.sources[0].path'."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def key_parts(key: str) -> Key:
    """'data.sources[0].lang' -> ('data', 'sources', 0, 'lang'): the inverse of `dotted`."""
    return tuple(int(index) if index else name for name, index in _DOTTED_PART.findall(key))


class LangadaptError(Exception):
    """A user-fixable error; the message is one line naming what and where.

    `key`, where the error is about one recipe key, is that key's path parts: a report of recipe
    problems (`recipe.errors.Report`) locates the error by it (the `--set` flag or the recipe line
    that wrote the key), whatever the message says; `at` builds the usual `key: what` message.
    """

    def __init__(self, message: str, key: Key | str | None = None) -> None:
        super().__init__(message)
        self.key: Key | None = key_parts(key) if isinstance(key, str) else key

    @classmethod
    def at(cls, key: Key | str, what: str) -> LangadaptError:
        """The error `key: what` about recipe key `key` (path parts, or dotted as users write it)."""
        parts = key_parts(key) if isinstance(key, str) else key
        return cls(f"{dotted(parts)}: {what}", parts)

    @property
    def what(self) -> str:
        """The message less the `key: ` it starts with, if it does (a report writes the key itself)."""
        message = str(self)
        return message.removeprefix(f"{dotted(self.key)}: ") if self.key else message
