"""Which recipe file a run folder belongs to: two recipes with one `name` must not share a folder.

A run folder is `run_root/<name>`: copy a recipe, edit it and forget to rename it, and the copy
would resume (or skip) stages the original made, and then overwrite them. The first run records
the recipe file (resolved path and content hash, `RunLayout.owner`); a later run from another
file is refused with one line naming both, unless `--force` hands the folder over. The same
file re-run (edited, or with other `--set` overrides) is the same owner: fingerprints decide what
re-runs. A recipe moved or copied unchanged (same content hash) is the same owner too.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from langadapt.errors import LangadaptError
from langadapt.ioerrors import make_folder
from langadapt.recipe import LoadedRecipe
from langadapt.run.contenthash import file_sha256
from langadapt.run.layout import RunLayout, owning_run_dir

log = logging.getLogger("langadapt")


def recipe_identity(loaded: LoadedRecipe) -> dict[str, str | None]:
    """The recipe file's resolved path and sha256 (None when it is not a file on disk)."""
    path = Path(loaded.path).resolve()
    return {"recipe": str(path), "sha256": file_sha256(path) if path.is_file() else None}


def recorded_owner(layout: RunLayout) -> dict | None:
    """The identity the folder's first run recorded; None for a new folder or one made before
    owners were recorded (adopted by the next run)."""
    try:
        owner = json.loads(layout.owner.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return owner if isinstance(owner, dict) and isinstance(owner.get("recipe"), str) else None


def claim_run(loaded: LoadedRecipe, layout: RunLayout, take_over: bool, record: bool) -> None:
    """Refuse a run folder another recipe file made (unless `take_over`) or one inside another run;
    with `record`, write this recipe as its owner (under the run lock: a dry run only checks)."""
    _check_place(layout.root)
    mine, owner = recipe_identity(loaded), recorded_owner(layout)
    same = owner is None or owner["recipe"] == mine["recipe"] or (
        mine["sha256"] is not None and owner.get("sha256") == mine["sha256"])
    if not same and not take_over:
        raise LangadaptError(
            f"{layout.root}: run folder of recipe {owner['recipe']}, and {mine['recipe']} has the same "  # type: ignore[index]
            f"name {loaded.recipe.name!r}: rename one (name:), or pass --force to give the folder to this "
            "recipe (every stage re-runs)")
    if record and owner != mine:
        make_folder(layout.root, "run folder")
        tmp = layout.owner.with_name(layout.owner.name + ".tmp")
        tmp.write_text(json.dumps(mine, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, layout.owner)


def _check_place(root: Path) -> None:
    """Where the run folder really is, said when it is not where the recipe seems to put it.

    A run folder inside another run's folder (a `run_root` set to a run directory) is refused: the
    outer run's lock, fingerprints and `langadapt eval` would take the inner one for part of it. A
    symlinked run folder (or run_root) is followed, as a cluster user linking runs to scratch
    storage wants, and the real place is said once."""
    real = root.resolve()
    outer = owning_run_dir(real.parent)
    if outer is not None:
        raise LangadaptError(f"{root}: run folder inside the folder of another run ({outer}){_real(root, real)}: "
                             "choose a run_root outside every run directory")
    if real != root.absolute():
        log.info("%s is a link: this run reads and writes %s", root, real)


def _real(root: Path, real: Path) -> str:
    return f" (it resolves to {real})" if real != root.absolute() else ""
