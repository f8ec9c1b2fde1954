"""The Debian corpus builder's pieces, offline: language vote, HTML extraction, .deb reading."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path

import pytest

from langadapt.corpora import debian_docs
from langadapt.corpora.debian_docs import build_debian_corpus, read_deb_package, resolve_locale
from langadapt.corpora.html_text import html_paragraphs
from langadapt.corpora.langvote import matches_language, stopword_scores
from langadapt.errors import LangadaptError
from tests.helpers.langvote import vote_language

# One sentence each, about the same thing, in the six languages the vote knows.
SAMPLES = {
    "nb": "Jeg vet ikke hva som skjedde, men hun ble hjemme fordi det regnet hele dagen.",
    "nn": "Eg veit ikkje kva som hende, men ho vart heime fordi det regna heile dagen.",
    "da": "Jeg ved ikke hvad der skete, men hun blev hjemme efter at det havde regnet hele dagen.",
    "sv": "Jag vet inte vad som hände, men hon blev hemma eftersom det regnade hela dagen.",
    "en": "I do not know what happened, but she stayed at home because it was raining all day.",
    "fi": "En tiedä mitä tapahtui, mutta hän jäi kotiin, koska satoi koko päivän ja se oli ikävää.",
}

# Real paragraphs of the kind the packages hold (technical documentation).
DOC_SAMPLES = {
    "nb": "Kommandoen vil vise alle filer som ble levert med pakken i stedet for de installerte.",
    "nn": "Du har tilgang til dette menyvalet på biletmenyen via Bilete, og det er ikkje vanskeleg.",
    "da": "Filformatet understøtter ikke nogle af de grundlæggende egenskaber, hvis du har brug for dem.",
    "sv": "Det aktiva lagret och dess histogram visas innan du väljer att sträcka ut kontrasten.",
    "en": "Sometimes we refer to a file or a command and you might wonder in which package it is found.",
}


@pytest.mark.parametrize("lang", sorted(SAMPLES))
def test_vote_picks_the_language_of_a_short_sentence(lang: str) -> None:
    assert vote_language(SAMPLES[lang]) == lang


@pytest.mark.parametrize("lang", sorted(DOC_SAMPLES))
def test_vote_on_documentation_paragraphs(lang: str) -> None:
    assert vote_language(DOC_SAMPLES[lang]) == lang
    others = set(DOC_SAMPLES) - {lang}
    assert matches_language(DOC_SAMPLES[lang], lang)
    assert not any(matches_language(DOC_SAMPLES[lang], other) for other in others)


def test_shared_words_weigh_less_than_distinctive_ones() -> None:
    # "og" is in three lists, "ikkje" only in Nynorsk's.
    assert stopword_scores("og")["nb"] == pytest.approx(1 / 3)
    assert stopword_scores("ikkje") == {"nb": 0, "nn": 1, "da": 0, "sv": 0, "en": 0, "fi": 0}


def test_ties_keep_neighbours_but_drop_english_fallbacks() -> None:
    assert vote_language("RAID og LVM") is None  # nb, nn and da tie on "og"
    assert matches_language("RAID og LVM", "nb")  # ... and that is no evidence against a nb page
    assert not matches_language("Package Manager for OS X", "nb")  # tie with English on "for"
    assert not matches_language("Forrige Neste", "nb")  # no stopword at all: navigation labels
    names = "Jan Smith , Hans De Jonge , Marcia van den Hout , " * 5
    assert not matches_language(names, "nn")  # one stray "den" in a list of names


PAGE = """<?xml version="1.0" encoding="UTF-8"?>
<html><head><title>Tittel som ikke skal med</title><style>p {color: red}</style>
<script>var x = "og det er ikke tekst";</script></head>
<body><div class="navheader"><table><tr><th>Forrige kapittel og neste</th></tr></table></div>
<div id="banner"><a href="x">Download the ebook</a></div>
<ul class="docnav"><li><a href="a.html"><strong>Forrige</strong></a></li></ul>
<h2 class="title">1.2. Om <code>apt-file</code></h2>
<div class="para">Kommandoen <code class="command">apt-file</code> finner
   pakken til en fil.<a id="x1" class="indexterm"/></div>
<div class="informalexample"><pre class="programlisting">apt-file search bin/ls &amp;&amp; echo ok</pre></div>
<p>Første avsnitt &amp; mer.<br/>Samme avsnitt.</p>
<ul><li><p>Et punkt i en liste.</p></li></ul>
<div class="navfooter"><a href="b.html">Neste</a></div></body></html>"""


def test_html_extraction_keeps_text_and_drops_navigation_and_code() -> None:
    paragraphs = html_paragraphs(PAGE)
    assert paragraphs == [
        "1.2. Om apt-file",
        "Kommandoen apt-file finner pakken til en fil.",
        "Første avsnitt & mer.",
        "Samme avsnitt.",
        "Et punkt i en liste.",
    ]


def test_html_extraction_survives_sloppy_html() -> None:
    assert html_paragraphs("<p>one<p>two</span></div><li>three") == ["one", "two", "three"]


def _fake_deb(path: Path, package: str, files: dict[str, str]) -> Path:
    """A minimal .deb (ar archive of control.tar.gz and data.tar.xz), as dpkg-deb would write."""

    def tar_bytes(entries: dict[str, bytes], mode: str) -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode=mode) as tar:
            for name, data in entries.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return buf.getvalue()

    control = f"Package: {package}\nVersion: 1.0-1\nArchitecture: all\n".encode()
    members = {
        "debian-binary": b"2.0\n",
        "control.tar.gz": tar_bytes({"./control": control}, "w:gz"),
        "data.tar.xz": tar_bytes({f"./{k}": v.encode() for k, v in files.items()}, "w:xz"),
    }
    out = bytearray(b"!<arch>\n")
    for name, data in members.items():
        out += f"{name:<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(data):<10}`\n".encode()
        out += data + (b"\n" if len(data) % 2 else b"")
    path.write_bytes(bytes(out))
    return path


def test_build_from_a_deb_file(tmp_path: Path) -> None:
    root = "usr/share/doc/debian-handbook/html/nb-NO/"
    nb = "<p>" + DOC_SAMPLES["nb"] * 3 + "</p><p>" + DOC_SAMPLES["en"] + "</p>"
    deb = _fake_deb(
        tmp_path / "debian-handbook_1.0-1_all.deb",
        "debian-handbook",
        {root + "b.html": nb, root + "a.html": nb, root + "stub.html": "<p>Om og</p>", "other/x.html": nb},
    )
    assert read_deb_package(deb) == "debian-handbook"
    out = build_debian_corpus("debian-handbook", "nb", tmp_path / "out" / "nb.jsonl.gz", deb=deb)
    with gzip.open(out, "rt", encoding="utf-8") as f:
        docs = [json.loads(line) for line in f]
    assert [d["id"] for d in docs] == [f"debian-handbook/{root}a.html", f"debian-handbook/{root}b.html"]
    assert list(docs[0]) == ["text", "lang", "source", "id"]
    assert docs[0]["text"] == DOC_SAMPLES["nb"] * 3  # the English paragraph was dropped
    assert docs[0]["lang"] == "nb" and docs[0]["source"] == "debian-handbook"
    note = Path(f"{out}.LICENSE.txt").read_text()
    assert "debian-handbook 1.0-1" in note and "CC-BY-SA-3.0" in note
    first = out.read_bytes()
    out.unlink()
    build_debian_corpus("debian-handbook", "nb-NO", out, deb=deb)
    assert out.read_bytes() == first  # byte-reproducible
    deb.unlink()
    assert build_debian_corpus("debian-handbook", "nb", out, deb=deb) == out  # reused, deb not read


def test_locales_resolve_from_our_codes() -> None:
    assert resolve_locale("debian-handbook", "nb") == ("nb-NO", "nb")
    assert resolve_locale("debian-handbook", "sv-SE") == ("sv-SE", "sv")
    assert resolve_locale("gimp-help-nn", "nn") == ("nn", "nn")
    with pytest.raises(LangadaptError, match="no stopword list for 'de'"):
        resolve_locale("debian-handbook", "de-DE")
    with pytest.raises(LangadaptError, match="unsupported"):
        resolve_locale("python3-doc", "en")


def test_without_apt_the_error_says_how_to_provide_the_package(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(debian_docs.shutil, "which", lambda name: None)
    with pytest.raises(LangadaptError) as info:
        build_debian_corpus("gimp-help-nn", "nn", tmp_path / "nn.jsonl.gz", tmp_path / "cache")
    message = str(info.value)
    assert "apt-get not found" in message and str(tmp_path / "cache") in message and "--deb" in message
    assert "\n" not in message


def test_a_file_that_is_not_a_deb_is_a_clear_error(tmp_path: Path) -> None:
    bogus = tmp_path / "gimp-help-nn_1_all.deb"
    bogus.write_text("hello")
    with pytest.raises(LangadaptError, match="not a .deb"):
        build_debian_corpus("gimp-help-nn", "nn", tmp_path / "nn.jsonl.gz", deb=bogus)
