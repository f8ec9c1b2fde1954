"""The one exception type users see.

Everything the user can fix (a bad recipe, a missing file, an empty corpus) is raised as a
`LangadaptError` with a one-line message that says what is wrong and where (file, key, line).
The CLI prints it as a single line and exits with `EXIT_USER_ERROR`; anything else is a bug and
keeps its traceback.
"""

EXIT_USER_ERROR = 2
"""The exit status of a command refused for something the user can fix (also `run --dry-run`'s
when it found a problem)."""


class LangadaptError(Exception):
    """A user-fixable error; the message is one line naming what and where."""
