"""Builders of sample corpora, outside the library's core: the Debian documentation packages the
CPU demo trains on (`debian_docs`, with the HTML-to-text extraction in `html_text`).

The data stage reaches them only through a source's `fetch:` key (`data.source_paths._fetch`); a
project with its own corpora never imports this package.
"""
