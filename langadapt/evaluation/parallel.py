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
writes them) the recipe's data stage holds out in BOTH languages, so no text of a pair is ever in
the training split. The data stage itself decides, not a copy of its rule: the documents go through
its own cleaning, deduplication and split (`data.merge.merge`, with the hash key, the
`max_valid_docs` cap and the held-out floor), and the held-out files it writes name the pages
(tests/evaluation/test_eval_translation.py runs the real data stage on the same documents and
compares, and on the demo's corpus checks the shipped pairs). A recipe with `data.split_by: id`
(the demo) holds a page out with its translations, so every page it holds out gives pairs; split by
text, a page and its translation fall on either side independently and few pages are held out in both.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from langadapt.corpora.debian_docs import HTML_DIRS, page_documents, read_deb, resolve_locale
from langadapt.corpora.html_text import html_paragraphs
from langadapt.corpora.langvote import matches_language
from langadapt.data.cleaning import DocumentFilter
from langadapt.data.documents import iter_split, write_documents
from langadapt.data.merge import merge
from langadapt.data.preparation import clean_piece, init_worker, plan_jobs
from langadapt.data.workers import ordered_batches
from langadapt.errors import LangadaptError
from langadapt.recipe.data import DataConfig, SourceConfig
from langadapt.run.context import StageContext


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


def held_out_documents(docs_by_source: dict[str, list[dict]], data: DataConfig) -> dict[str, list[dict]]:
    """The documents the data stage of `data` holds out, run here on exactly `docs_by_source` ({the
    name of one of `data.sources`: its documents, `text` and `id`, in reading order}), as it writes
    them (cleaned text), by source name.

    This is the data stage's own decision, not a copy of it: its cleaning, deduplication and split
    (`data.merge.merge`, in this process), so the hash key (`split_digest`), `valid_fraction`,
    the `max_valid_docs` cap and the `min_valid_documents` floor of a target source all hold. Each
    source keeps its recipe settings (role, `max_docs`) and reads these documents in place of its
    files; the recipe's other sources are left out (exact dedup against them only drops documents,
    so no held-out document here is trained there, though a cap may then hold out fewer)."""
    sources = {source.name: source for source in data.sources}
    unknown = sorted(set(docs_by_source) - set(sources))
    if unknown:
        raise ValueError(f"not sources of this data section: {unknown}; it has {sorted(sources)}")
    with_file = [name for name in docs_by_source if sources[name].valid_path is not None]
    if with_file:
        raise LangadaptError(f"source {with_file[0]}: its held-out documents are its valid_path file, not these "
                             "documents: pages held out from it cannot be told from the recipe")
    with tempfile.TemporaryDirectory(prefix="langadapt-held-out-") as tmp:
        root = Path(tmp)
        read_as: list[SourceConfig] = []
        for source in data.sources:  # the recipe's order: dedup keeps the first copy it reads
            if source.name in docs_by_source:
                path = root / "documents" / f"{source.name}.jsonl.gz"
                write_documents(path, docs_by_source[source.name])
                read_as.append(source.model_copy(update={
                    "path": str(path), "format": "jsonl", "text_field": "text", "fetch": None, "subset": None,
                    "revision": None, "data_files": None}))
        config = data.model_copy(update={"sources": read_as, "num_workers": 1, "engine": "local"})
        jobs, _ = plan_jobs(config)
        ctx = StageContext(root / "run", "data", seed=0, log=logging.getLogger("langadapt.evaluation.parallel"))
        stream = ordered_batches(jobs, clean_piece, 1, initializer=init_worker, initargs=(config,))
        try:
            merge(config, jobs, stream, ctx)
        finally:
            stream.close()
        held: dict[str, list[dict]] = {name: [] for name in docs_by_source}
        for doc in iter_split(ctx.out, "valid"):
            held[doc["source"]].append(doc)
    return held


def held_out_pages(docs_by_source: dict[str, list[dict]], data: DataConfig) -> set[str]:
    """Page keys whose documents the data stage of `data` holds out in every source given
    (`held_out_documents`): only those pages are free of training text in all their languages."""
    cleaner = DocumentFilter(data.cleaning)  # the written text is the cleaned one: match pages on it
    held_docs = held_out_documents(docs_by_source, data)
    keys: set[str] | None = None
    for name, docs in docs_by_source.items():
        texts = {doc["text"] for doc in held_docs[name]}
        pages = {page_key(d["id"]) for d in docs if cleaner.normalize(d["text"].replace("\x00", "")) in texts}
        keys = pages if keys is None else keys & pages
    return keys or set()


def handbook_source(data: DataConfig, lang: str) -> str:
    """The name of the recipe's source that reads the handbook in `lang` (its `fetch` names the
    package; else the one source of that language)."""
    of_lang = [s for s in data.sources if s.lang == lang]
    fetched = [s for s in of_lang if s.fetch is not None and s.fetch.debian_package == "debian-handbook"]
    found = fetched or (of_lang if len(of_lang) == 1 else [])
    if not found:
        raise LangadaptError(f"data.sources: no source reads the debian-handbook in {lang} (a `fetch: "
                             f"{{debian_package: debian-handbook}}` source, or the only {lang} source): the pairs "
                             "must be pages that recipe holds out")
    return found[0].name


def handbook_pairs(deb: Path, locales: tuple[str, str], data: DataConfig,
                   limits: PairLimits = PairLimits()) -> list[dict[str, str]]:
    """The Debian Administrator's Handbook's aligned paragraphs in two locales (e.g. nb-NO, en-US),
    from the pages the data stage of `data` (a recipe's data section) holds out in both languages,
    less the pairs with a side that a training page quotes (a sidebar's title such as
    "TIP Removing and installing at the same time" is also the text of links to it on other pages)."""
    (src_locale, src_lang), (tgt_locale, tgt_lang) = (resolve_locale("debian-handbook", loc) for loc in locales)
    prefix = {lang: HTML_DIRS["debian-handbook"].format(locale=loc)
              for lang, loc in ((src_lang, src_locale), (tgt_lang, tgt_locale))}
    everything = read_deb(Path(deb), os.path.commonprefix(list(prefix.values())))[1]  # one pass over the package
    pages = {lang: {p: b for p, b in everything.items() if p.startswith(pre)} for lang, pre in prefix.items()}
    docs = {lang: list(page_documents("debian-handbook", p, lang, "debian-handbook")) for lang, p in pages.items()}
    held = held_out_pages({handbook_source(data, lang): lang_docs for lang, lang_docs in docs.items()}, data)
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
