"""Build the demo corpus files from Debian documentation packages.

    python corpora/build.py --out corpora/build [--only nb.debian-handbook ...] [--all]
                            [--cache corpora/cache] [--deb path/to/package.deb ...]

writes `<out>/<lang>.<source>.jsonl.gz` (one document per HTML page: `text, lang, source, id`)
and a licence note beside each. Files already built are kept, packages already in the cache are
not downloaded again. Without apt (not Debian/Ubuntu), fetch the packages elsewhere with
`apt-get download debian-handbook gimp-help-nn` (or from packages.debian.org) and pass them with
`--deb`, or drop them into the cache folder. The corpus cards are in corpora/README.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from langadapt.corpora.debian_docs import SOURCES, build_debian_corpus, read_deb_package
from langadapt.errors import LangadaptError

#: What the tiny demo recipes read: Bokmål and Nynorsk targets, English source, Swedish neighbour.
DEMO = ("nb.debian-handbook", "en.debian-handbook", "nn.gimp-help", "sv.debian-handbook")
HERE = Path(__file__).resolve().parent


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--out", type=Path, default=HERE / "build", help="output folder")
    parser.add_argument("--cache", type=Path, default=HERE / "cache", help="where .deb files are kept")
    parser.add_argument(
        "--only", nargs="+", metavar="NAME", help=f"corpora to build (default: {' '.join(DEMO)})"
    )
    parser.add_argument("--all", action="store_true", help=f"build every known corpus: {' '.join(SOURCES)}")
    parser.add_argument(
        "--deb", nargs="+", type=Path, default=[], metavar="PATH", help="package files to use instead of apt"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = list(SOURCES) if args.all else (args.only or list(DEMO))
    try:
        unknown = [n for n in names if n not in SOURCES]
        if unknown:
            raise LangadaptError(f"--only {' '.join(unknown)}: unknown corpus; known: {', '.join(SOURCES)}")
        debs = {read_deb_package(path): path for path in args.deb}
        for name in names:
            package, locale = SOURCES[name]
            start = time.perf_counter()
            out = build_debian_corpus(
                package, locale, args.out / f"{name}.jsonl.gz", args.cache, deb=debs.get(package)
            )
            print(f"{name:22s} {out}  ({time.perf_counter() - start:.1f} s)")
    except LangadaptError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
