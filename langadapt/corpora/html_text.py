"""Paragraphs of running text from a documentation HTML page (stdlib `html.parser`).

What is dropped, and why: the head, scripts and styles; navigation (DocBook's navheader /
navfooter, Publican's docnav and banner, tables of contents), which repeats on every page and
would be learnt as boilerplate; and block-level code (`pre`: program listings, screen output,
command synopses), which is not the language being learnt and is mostly the same in every
translation. Inline code (`<code>apt-get</code>` inside a sentence) is kept, because removing it
leaves broken sentences ("copy it to the folder ."). Every block element (p, li, td, headings,
DocBook's div.para...) ends a paragraph; whitespace inside a paragraph is collapsed.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


BLOCK_TAGS = _words(
    "address article aside blockquote caption dd div dl dt figcaption figure footer h1 h2 h3 h4 h5 h6 "
    "header hr li main ol p section table tbody td tfoot th thead tr ul br"
)
SKIP_TAGS = _words(
    "head script style noscript template nav pre svg math button form select textarea iframe object"
)
# Navigation and code containers of the DocBook XSL (gimp-help) and Publican (debian-handbook) themes.
SKIP_CLASSES = _words(
    "navheader navfooter docnav toc list-of-figures list-of-tables list-of-examples indexterm "
    "reportbug programlisting screen synopsis cmdsynopsis funcsynopsis"
)
SKIP_IDS = _words("banner title breadcrumbs navigation sidebar-nav")
VOID_TAGS = _words("area base br col embed hr img input link meta param source track wbr")
_SPACE = re.compile(r"\s+")


def _skipped(tag: str, attrs: list[tuple[str, str | None]]) -> bool:
    """Whether an element (and everything inside it) is navigation, code or metadata."""
    if tag in SKIP_TAGS:
        return True
    values = dict(attrs)
    classes = set((values.get("class") or "").split())
    return bool(classes & SKIP_CLASSES) or values.get("id") in SKIP_IDS or values.get("role") == "navigation"


class ParagraphParser(HTMLParser):
    """Collects paragraph strings in document order; feed() a page, then close(), then read .paragraphs."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.paragraphs: list[str] = []
        self._buffer: list[str] = []
        self._open: list[str] = []  # open non-void elements, innermost last
        self._skip_depth: int | None = None  # len(self._open) when the skipped element opened

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in BLOCK_TAGS:
            self._flush()
        if tag in VOID_TAGS:
            return
        self._open.append(tag)
        if self._skip_depth is None and _skipped(tag, attrs):
            self._skip_depth = len(self._open)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        # XHTML `<br />`, `<a id="x"/>`: nothing opens, but a block still ends a paragraph.
        if tag in BLOCK_TAGS:
            self._flush()

    def handle_endtag(self, tag: str) -> None:
        if tag not in self._open:
            return  # stray end tag: ignoring it keeps the open-element stack consistent
        while self._open:
            closed = self._open.pop()
            if self._skip_depth is not None and len(self._open) < self._skip_depth:
                self._skip_depth = None
            if closed == tag:
                break
        if tag in BLOCK_TAGS:
            self._flush()

    def handle_data(self, data: str) -> None:
        if self._skip_depth is None:
            self._buffer.append(data)

    def close(self) -> None:
        super().close()
        self._flush()

    def _flush(self) -> None:
        # Inside a skipped element the buffer only holds text from before it: keep it pending.
        if self._skip_depth is not None:
            return
        text = _SPACE.sub(" ", "".join(self._buffer)).strip()
        if text:
            self.paragraphs.append(text)
        self._buffer.clear()


def html_paragraphs(html: str) -> list[str]:
    """The running-text paragraphs of one HTML page, in order."""
    parser = ParagraphParser()
    parser.feed(html)
    parser.close()
    return parser.paragraphs
