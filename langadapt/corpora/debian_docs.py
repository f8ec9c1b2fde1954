"""Real, freely licensed text for the demo: documentation pages from Debian packages.

The Debian Administrator's Handbook (`debian-handbook`) and the GIMP manual (`gimp-help-<lang>`)
ship translated HTML. `build_debian_corpus` fetches one package with `apt-get download`, reads
the pages of one locale straight out of the .deb (an `ar` archive holding `data.tar.*`, read with
the stdlib, so neither `dpkg` nor an extraction directory is needed), keeps the paragraphs that
are written in the page's language and writes one document per page as `.jsonl.gz`
(`text, lang, source, id`) plus a licence note.

Why a paragraph filter: translations fall back to the English original for every string nobody
translated, so a "Norwegian" page is partly English. The filter is a stopword vote with small
hand-written lists (`langadapt.corpora.langvote`): six languages do not justify a language-ID
dependency, and only the page's own language versus its neighbours has to be decided.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

from langadapt.corpora.html_text import html_paragraphs
from langadapt.corpora.langvote import STOPWORDS, matches_language
from langadapt.errors import LangadaptError

#: Where each package keeps its HTML, per locale directory.
HTML_DIRS = {
    "debian-handbook": "usr/share/doc/debian-handbook/html/{locale}/",
    "gimp-help": "usr/share/gimp/2.0/help/{locale}/",
}
#: Licence of each package family, from its debian/copyright.
LICENCES = {
    "debian-handbook": "GPL-2.0+ or CC-BY-SA-3.0 (debian/copyright of debian-handbook)",
    "gimp-help": "GFDL-NIV-1.2+: GNU FDL 1.2 or later, no invariant sections "
    "(debian/copyright of gimp-help-common)",
}
#: Our corpus names `<lang>.<source>` -> (Debian package, locale directory in it). Checked
#: against bookworm: the handbook has en-US, nb-NO, sv-SE (its da-DK has 3 translated pages, no
#: Finnish, no Nynorsk); gimp-help has nn, en, sv, da, fi (no Bokmål package).
SOURCES: dict[str, tuple[str, str]] = {
    "nb.debian-handbook": ("debian-handbook", "nb-NO"),
    "en.debian-handbook": ("debian-handbook", "en-US"),
    "sv.debian-handbook": ("debian-handbook", "sv-SE"),
    "nn.gimp-help": ("gimp-help-nn", "nn"),
    "en.gimp-help": ("gimp-help-en", "en"),
    "sv.gimp-help": ("gimp-help-sv", "sv"),
    "da.gimp-help": ("gimp-help-da", "da"),
    "fi.gimp-help": ("gimp-help-fi", "fi"),
}
#: Pages with less kept text than this are a title or a stub (the reference pack drops them too).
MIN_PAGE_CHARS = 200


def default_cache_dir() -> Path:
    """Where .deb files are kept when no cache_dir is given: $LANGADAPT_DEB_CACHE, else the user cache."""
    if os.environ.get("LANGADAPT_DEB_CACHE"):
        return Path(os.environ["LANGADAPT_DEB_CACHE"])
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "langadapt" / "debs"


def family_of(package: str) -> str:
    """`debian-handbook` or `gimp-help` for a package name; the HTML layout depends on it."""
    if package == "debian-handbook":
        return package
    if package.startswith("gimp-help-") and package != "gimp-help-common":
        return "gimp-help"
    raise LangadaptError(
        f"package {package!r}: unsupported; use debian-handbook or gimp-help-<lang> (e.g. gimp-help-nn)"
    )


def resolve_locale(package: str, locale: str) -> tuple[str, str]:
    """(locale directory, our language code); `locale` may be a directory ('nb-NO') or a code ('nb')."""
    family = family_of(package)
    for name, (pkg, loc) in SOURCES.items():
        if pkg == package and locale in (loc, name.split(".")[0]):
            locale = loc
            break
    lang = locale.replace("_", "-").split("-")[0].lower()
    if lang not in STOPWORDS:
        raise LangadaptError(
            f"{package} locale {locale!r}: no stopword list for {lang!r} (have {', '.join(STOPWORDS)}); "
            f"the paragraph language vote needs one"
        )
    return (locale if family == "debian-handbook" or locale != lang else lang), lang


def fetch_deb(package: str, cache_dir: Path) -> Path:
    """The newest cached `<package>_*.deb`, downloaded with `apt-get download` when missing."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    cached = sorted(cache_dir.glob(f"{package}_*.deb"), key=lambda p: p.stat().st_mtime)
    if cached:
        return cached[-1]
    if shutil.which("apt-get") is None:
        raise LangadaptError(
            f"apt-get not found: download {package}_<version>_all.deb on a Debian/Ubuntu machine "
            f"(apt-get download {package}) or from https://packages.debian.org/bookworm/all/{package}/download "
            f"and put it in {cache_dir} (or pass --deb PATH to corpora/build.py)"
        )
    if not _apt_download(package, cache_dir):
        # A fresh container has empty package lists: refresh them once, then retry.
        subprocess.run(["apt-get", "update"], check=False, capture_output=True, text=True)
        if not _apt_download(package, cache_dir, raise_on_error=True):
            raise LangadaptError(f"apt-get download {package}: finished but left no .deb in {cache_dir}")
    return fetch_deb(package, cache_dir)


def _apt_download(package: str, cache_dir: Path, raise_on_error: bool = False) -> bool:
    """Run `apt-get download` in cache_dir; True when a .deb arrived."""
    proc = subprocess.run(
        ["apt-get", "download", package], check=False, cwd=cache_dir, capture_output=True, text=True
    )
    if proc.returncode != 0 and raise_on_error:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise LangadaptError(
            f"apt-get download {package} failed ({last}); put {package}_<version>_all.deb in {cache_dir} "
            f"by hand (or pass --deb PATH to corpora/build.py)"
        )
    return proc.returncode == 0 and any(cache_dir.glob(f"{package}_*.deb"))


def _ar_members(deb: Path) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of each member of a .deb; the `ar` format is a magic line plus 60-byte headers."""
    with open(deb, "rb") as f:
        if f.read(8) != b"!<arch>\n":
            raise LangadaptError(f"{deb}: not a .deb file (no ar archive header)")
        while len(header := f.read(60)) == 60:
            name = header[:16].decode("ascii", "replace").strip().rstrip("/")
            size = int(header[48:58].decode("ascii").strip())
            yield name, f.read(size)
            f.read(size % 2)  # members are padded to an even offset


def _open_tar(name: str, blob: bytes) -> tarfile.TarFile:
    """A tarfile over a .deb member: gz/xz/bz2 natively, zstd (Ubuntu) through `zstandard`."""
    if name.endswith(".zst"):
        try:
            import zstandard
        except ImportError as exc:
            raise LangadaptError(f"{name} is zstd-compressed: pip install zstandard") from exc
        blob = zstandard.ZstdDecompressor().decompressobj().decompress(blob)
    return tarfile.open(fileobj=io.BytesIO(blob), mode="r:*")


def _parse_control(name: str, blob: bytes) -> dict[str, str]:
    """The fields of the `control` file inside a .deb's control.tar.*."""
    with _open_tar(name, blob) as tar:
        member = next(m for m in tar.getmembers() if m.name.removeprefix("./") == "control")
        text = tar.extractfile(member).read().decode("utf-8")  # type: ignore[union-attr]
    return dict(line.split(": ", 1) for line in text.splitlines() if ": " in line and line[0] != " ")


def read_deb(deb: Path, prefix: str | None = None) -> tuple[dict[str, str], dict[str, bytes]]:
    """(control fields, {path: bytes} of the regular files under `prefix`); prefix None reads no files."""
    control: dict[str, str] = {}
    files: dict[str, bytes] = {}
    try:
        for name, blob in _ar_members(deb):
            if name.startswith("control.tar"):
                control = _parse_control(name, blob)
            elif name.startswith("data.tar") and prefix is not None:
                with _open_tar(name, blob) as tar:
                    for member in tar:
                        path = member.name.removeprefix("./")
                        if member.isfile() and path.startswith(prefix):
                            files[path] = tar.extractfile(member).read()  # type: ignore[union-attr]
    except (OSError, tarfile.TarError, EOFError, ValueError, StopIteration) as exc:
        raise LangadaptError(
            f"{deb}: unreadable .deb ({type(exc).__name__}: {exc}); delete it to download it again"
        ) from exc
    if "Package" not in control:
        raise LangadaptError(f"{deb}: no control file; is it a complete .deb?")
    return control, files


def read_deb_package(deb: Path) -> str:
    """The package name a .deb file holds (so `--deb` files can be matched to corpora)."""
    if not Path(deb).is_file():
        raise LangadaptError(f"--deb {deb}: file not found")
    return read_deb(Path(deb))[0]["Package"]


def page_documents(package: str, pages: dict[str, bytes], lang: str, source: str) -> Iterator[dict]:
    """One document per HTML page, in path order, holding only the paragraphs in `lang`."""
    for path in sorted(pages):
        if not path.endswith((".html", ".htm")):
            continue
        html = pages[path].decode("utf-8", errors="replace")
        kept = [p for p in html_paragraphs(html) if matches_language(p, lang)]
        if sum(map(len, kept)) >= MIN_PAGE_CHARS:
            # The id is the page's path inside its package: stable across builds and machines.
            yield {"text": "\n\n".join(kept), "lang": lang, "source": source, "id": f"{package}/{path}"}


def build_debian_corpus(
    package: str, locale: str, out_path: Path, cache_dir: Path | None = None, *, deb: Path | None = None
) -> Path:
    """Build `out_path` (.jsonl.gz) from one locale of a Debian documentation package; reused if present.

    `deb` skips apt entirely (a package file fetched elsewhere); otherwise the .deb is taken from
    `cache_dir` or downloaded into it. A licence note is written to `<out_path>.LICENSE.txt`.
    """
    out_path = Path(out_path)
    if out_path.exists():
        return out_path
    family = family_of(package)
    locale, lang = resolve_locale(package, locale)
    deb = Path(deb) if deb is not None else fetch_deb(package, Path(cache_dir or default_cache_dir()))
    if not deb.is_file():
        raise LangadaptError(f"--deb {deb}: file not found")
    prefix = HTML_DIRS[family].format(locale=locale)
    control, pages = read_deb(deb, prefix)
    if control.get("Package") != package:
        raise LangadaptError(f"{deb}: holds package {control.get('Package')!r}, expected {package!r}")
    if not pages:
        raise LangadaptError(f"{deb}: no files under /{prefix} (is {locale!r} a locale of {package}?)")
    docs = list(page_documents(package, pages, lang, family))
    if not docs:
        raise LangadaptError(f"{deb}: no page under /{prefix} has paragraphs in {lang!r}")
    _write_jsonl_gz(out_path, docs)
    _write_licence_note(out_path, package, control["Version"], deb, prefix, docs)
    return out_path


def _write_jsonl_gz(path: Path, docs: list[dict]) -> None:
    """Atomic, byte-reproducible write (gzip mtime 0, so the same input gives the same file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as gz:
        for doc in docs:
            gz.write((json.dumps(doc, ensure_ascii=False) + "\n").encode("utf-8"))
    tmp.replace(path)


def _write_licence_note(
    path: Path, package: str, version: str, deb: Path, prefix: str, docs: list[dict]
) -> None:
    """The provenance and licence of a built file, next to it, as the licences require."""
    digest = hashlib.sha256(deb.read_bytes()).hexdigest()
    chars = sum(len(d["text"]) for d in docs)
    note = (
        f"{path.name}: paragraphs extracted from the Debian package {package} {version}\n"
        f"  pages: /{prefix}*.html ({len(docs)} documents, {chars} characters)\n"
        f"  package file: {deb.name} (sha256 {digest})\n"
        f"  licence: {LICENCES[family_of(package)]}\n"
        "  changes: HTML markup, navigation and code blocks removed; paragraphs not in the page's\n"
        "  language (untranslated English fallbacks) dropped. Built by langadapt.corpora.debian_docs.\n"
    )
    Path(f"{path}.LICENSE.txt").write_text(note, encoding="utf-8")
