"""Build the demo corpus files from Debian documentation packages.

    python corpora/build.py --out corpora/build [--only nb.debian-handbook ...] [--all]
                            [--cache corpora/cache] [--deb path/to/package.deb ...]
    python corpora/build.py --pairs eval/data/translation_nb_en.jsonl [--pairs-recipe RECIPE]

writes `<out>/<lang>.<source>.jsonl.gz` (one document per HTML page: `text, lang, source, id`)
and a licence note beside each. Files already built are kept, packages already in the cache are
not downloaded again. Without apt (not Debian/Ubuntu), fetch the packages elsewhere with
`apt-get download debian-handbook gimp-help-nn` (or from packages.debian.org) and pass them with
`--deb`, or drop them into the cache folder. The corpus cards are in corpora/README.md.

`--pairs` writes the translation task's nb/en paragraph pairs instead
(`langadapt.evaluation.parallel`): the handbook pages that `--pairs-recipe`'s data stage holds out
in both languages, so the recipe never trains on a pair.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from langadapt.corpora.debian_docs import SOURCES, build_debian_corpus, fetch_deb, read_deb_package
from langadapt.evaluation.parallel import handbook_pairs, write_pairs
from langadapt.errors import LangadaptError
from langadapt.recipe import load_recipe

#: What the tiny demo recipes read: Bokmål and Nynorsk targets, English source, Swedish neighbour.
DEMO = ("nb.debian-handbook", "en.debian-handbook", "nn.gimp-help", "sv.debian-handbook")
HERE = Path(__file__).resolve().parent
DEMO_RECIPE = HERE.parent / "recipes" / "tiny_norwegian_warm.yaml"


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
    parser.add_argument("--pairs", type=Path, metavar="JSONL", help="write the nb/en translation pairs here")
    parser.add_argument("--pairs-recipe", type=Path, default=DEMO_RECIPE, metavar="RECIPE",
                        help="the pairs come from pages this recipe's data stage holds out (default: the demo)")
    return parser.parse_args(argv)


def build_pairs(out: Path, recipe: Path, cache: Path, deb: Path | None) -> int:
    """Write the handbook's nb/en pairs that `recipe` never trains on; returns how many."""
    data = load_recipe(recipe).recipe.data
    deb = deb or fetch_deb("debian-handbook", cache)
    return write_pairs(handbook_pairs(deb, ("nb-NO", "en-US"), data), out)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = list(SOURCES) if args.all else (args.only or list(DEMO))
    try:
        unknown = [n for n in names if n not in SOURCES]
        if unknown:
            raise LangadaptError(f"--only {' '.join(unknown)}: unknown corpus; known: {', '.join(SOURCES)}")
        debs = {read_deb_package(path): path for path in args.deb}
        if args.pairs:
            count = build_pairs(args.pairs, args.pairs_recipe, args.cache, debs.get("debian-handbook"))
            print(f"{args.pairs}: {count} nb/en pairs held out by {args.pairs_recipe}")
            return 0
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
