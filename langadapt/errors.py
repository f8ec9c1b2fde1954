"""The one exception type users see.

Everything the user can fix (a bad recipe, a missing file, an empty corpus) is raised as a
`LangadaptError` with a one-line message that says what is wrong and where (file, key, line).
The CLI prints it as a single line and exits non-zero; anything else is a bug and keeps its
traceback.
"""


class LangadaptError(Exception):
    """A user-fixable error; the message is one line naming what and where."""
