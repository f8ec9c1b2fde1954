"""Parallel paragraphs from translated documentation: the translation task's pairs.

A translated DocBook/Publican page keeps the structure of its original: the translation tool
(po4a, Publican) replaces each block's text and keeps every block, falling back to the original
string where a block was never translated. So within one page (same file name in both locales),
block i of one language is the translation of block i of the other, and a page whose block
counts differ was restructured: none of its positions is trusted. A position becomes a pair only
when both sides pass the corpus builder's own language vote (an untranslated fallback fails it)
and their lengths agree (`PairLimits`), which drops the occasional block merged or split by a
translator. No sentence aligner is needed and the result is deterministic.

Held out: `held_out_pages` keeps only pages whose corpus documents (exactly as `debian_docs`
writes them) the data stage's hash split puts in the held-out set in BOTH languages, so no text
of a pair is ever in the training split (tests/evaluation/test_eval_translation.py runs the data
stage and checks). A recipe with `data.split_by: id` (the demo) holds a page out with its
translations, so every page it holds out gives pairs; split by text, a page and its translation
fall on either side independently and few pages are held out in both.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from langadapt.corpora.debian_docs import HTML_DIRS, page_documents, read_deb, resolve_locale
from langadapt.corpora.html_text import html_paragraphs
from langadapt.corpora.langvote import matches_language
from langadapt.data.cleaning import DocumentFilter, hash_fraction, text_hash
from langadapt.data.preparation import split_digest
from langadapt.recipe.data import CleaningConfig


@dataclass(frozen=True)
class PairLimits:
    """Which aligned paragraphs make a pair: both sides' lengths (characters) and their ratio."""

    min_chars: int = 20
    """Shorter sides are headings or labels (`13.2.1.`-style numbers dominate them): dropped."""
    max_chars: int = 300
    """Longer sides cost CPU generation time in CI and exceed the tiny model's window with examples."""
    max_ratio: float = 1.5
    """Longest side / shortest side. Bokmål runs ~0.85-1.1x English here; beyond 1.5x a block was
    merged, split or only partly translated."""

    def accept(self, src: str, tgt: str) -> bool:
        """Whether (src, tgt) lengths agree and fall within the bounds."""
        short, long = sorted((len(src), len(tgt)))
        return short >= self.min_chars and long <= self.max_chars and long <= self.max_ratio * short


def align_page(
    src_blocks: list[str], tgt_blocks: list[str], langs: tuple[str, str], limits: PairLimits
) -> list[tuple[str, str]]:
    """Pairs (src, tgt) of one page's blocks by position; none when the block counts differ."""
    if len(src_blocks) != len(tgt_blocks):
        return []
    return [
        (s, t)
        for s, t in zip(src_blocks, tgt_blocks)
        if matches_language(s, langs[0]) and matches_language(t, langs[1]) and limits.accept(s, t)
    ]


def page_key(path: str) -> str:
    """A page's name without its locale folder: what is shared by a page and its translation."""
    return PurePosixPath(path).name


def parallel_pages(
    src_pages: dict[str, bytes], tgt_pages: dict[str, bytes], langs: tuple[str, str],
    limits: PairLimits, keep_page: Iterable[str] | None = None,
) -> Iterator[dict[str, str]]:
    """{src_lang, tgt_lang, "page"} rows from HTML pages ({path: bytes}) of two locales, page by page in
    name order; `keep_page` (page keys) restricts the pages used."""
    targets = {page_key(p): html for p, html in tgt_pages.items() if p.endswith((".html", ".htm"))}
    sources = {page_key(p): html for p, html in src_pages.items() if p.endswith((".html", ".htm"))}
    wanted = set(keep_page) if keep_page is not None else set(sources)
    for key in sorted(wanted & sources.keys() & targets.keys()):
        src = html_paragraphs(sources[key].decode("utf-8", errors="replace"))
        tgt = html_paragraphs(targets[key].decode("utf-8", errors="replace"))
        for s, t in align_page(src, tgt, langs, limits):
            yield {langs[0]: s, langs[1]: t, "page": key}


def held_out_pages(docs_by_lang: dict[str, list[dict]], valid_fraction: float,
                   cleaning: CleaningConfig | None = None, split_by: str = "text") -> set[str]:
    """Page keys whose corpus documents the data stage holds out in every language given.

    The data stage's own key (`langadapt.data.preparation.split_digest`) decides: by `text`, a hash of
    each cleaned document's text, so a page and its translation fall on either side independently;
    by `id`, a hash of the page's file name, the same in every language. Only pages held out in all
    languages are free of training text. (Not modelled: `data.max_valid_docs`, which moves some
    held-out documents to train, and documents the data stage's cleaning drops; the test on the
    real data stage would catch either.)"""
    cleaner = DocumentFilter(cleaning or CleaningConfig())
    held: set[str] | None = None
    for docs in docs_by_lang.values():
        keys = {page_key(d["id"]) for d in docs
                if hash_fraction(split_digest(text_hash(cleaner.normalize(d["text"])), d["id"], split_by))
                < valid_fraction}
        held = keys if held is None else held & keys
    return held or set()


def handbook_pairs(
    deb: Path, locales: tuple[str, str], valid_fraction: float,
    cleaning: CleaningConfig | None = None, limits: PairLimits = PairLimits(), split_by: str = "text",
) -> list[dict[str, str]]:
    """The Debian Administrator's Handbook's aligned paragraphs in two locales (e.g. nb-NO, en-US),
    from the pages a data stage with `valid_fraction` (and `cleaning`, `split_by`) holds out in both
    languages, less the pairs with a side that a training page quotes (a sidebar's title such as
    "TIP Removing and installing at the same time" is also the text of links to it on other pages)."""
    (src_locale, src_lang), (tgt_locale, tgt_lang) = (resolve_locale("debian-handbook", loc) for loc in locales)
    prefix = {lang: HTML_DIRS["debian-handbook"].format(locale=loc)
              for lang, loc in ((src_lang, src_locale), (tgt_lang, tgt_locale))}
    everything = read_deb(Path(deb), os.path.commonprefix(list(prefix.values())))[1]  # one pass over the package
    pages = {lang: {p: b for p, b in everything.items() if p.startswith(pre)} for lang, pre in prefix.items()}
    docs = {lang: list(page_documents("debian-handbook", p, lang, "debian-handbook")) for lang, p in pages.items()}
    held = held_out_pages(docs, valid_fraction, cleaning, split_by)
    trained = {lang: "\n".join(d["text"] for d in lang_docs if page_key(d["id"]) not in held)
               for lang, lang_docs in docs.items()}
    rows = parallel_pages(pages[src_lang], pages[tgt_lang], (src_lang, tgt_lang), limits, held)
    return interleave_pages(row for row in rows if not any(row[lang] in trained[lang] for lang in trained))


def interleave_pages(rows: Iterable[dict[str, str]]) -> list[dict[str, str]]:
    """Rows reordered round-robin over their pages (first row of each page, then the second, ...):
    a translation task scores the file's first rows (its `limit`), which then come from every
    page, not from the first pages in name order."""
    by_page: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        by_page.setdefault(row["page"], []).append(row)
    rounds = itertools.zip_longest(*by_page.values())
    return [row for round_ in rounds for row in round_ if row is not None]


def write_pairs(rows: Iterable[dict[str, str]], path: Path) -> int:
    """Write rows as JSONL (one object a line, UTF-8); returns how many."""
    count = 0
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    return count
