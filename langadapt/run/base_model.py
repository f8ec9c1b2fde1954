"""Where the base (source) model comes from: a local folder, built by its own recipe, or the Hub.

The pipeline resolves it before fingerprinting: a stage's fingerprint hashes the base model's
files, so they must exist first (see `fingerprint`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from langadapt.errors import LangadaptError
from langadapt.recipe import LoadedRecipe, Recipe, load_recipe

log = logging.getLogger("langadapt")


def resolve_base_model(recipe: Recipe, build: Callable[[LoadedRecipe], object] | None) -> str | None:
    """A local folder for the base model: as given, built by its recipe, or fetched from the Hub.

    `build` runs the base's own recipe when its folder is missing (the pipeline passes
    `run_pipeline`: the base is a run of its own, in its own run directory). With build=None
    (dry runs, fingerprints) nothing is built or downloaded: None when it is not there yet."""
    spec = recipe.base_model
    if spec.path is None:
        return None
    if Path(spec.path).is_dir():
        return spec.path
    hub_id = hub_repo_id(spec.path) is not None
    if build is None:  # a dry run: what is on this machine already, nothing built or downloaded
        return _hub_cached(spec.path, spec.revision) if hub_id and not spec.build_recipe else None
    if spec.build_recipe:
        log.info("base model %s is missing: building it with %s", spec.path, spec.build_recipe)
        build(load_recipe(spec.build_recipe))
        if not Path(spec.path).is_dir():
            raise LangadaptError(f"base_model.build_recipe {spec.build_recipe} did not produce {spec.path}")
        return spec.path
    if hub_id:
        from huggingface_hub import snapshot_download

        try:
            return snapshot_download(spec.path, revision=spec.revision)
        except Exception as exc:  # network, auth, missing repo: all user-fixable
            raise LangadaptError(f"base_model.path {spec.path}: not a local folder and the Hub download failed ({type(exc).__name__})") from None
    raise LangadaptError(f"base_model.path {spec.path}: folder not found")


def hub_repo_id(path: str | None) -> str | None:
    """The Hub id `path` names: `org/name` that is not a local folder, or a folder inside the Hub
    cache (`.../models--org--name/snapshots/<commit>`); None for any other local path."""
    if not path:
        return None
    local = Path(path)
    if local.is_dir():
        parts = local.resolve().parts
        if len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):
            return parts[-3][len("models--"):].replace("--", "/", 1)
        return None
    return path if path.count("/") == 1 and not path.startswith((".", "/", "~")) else None


def _hub_cached(repo_id: str, revision: str | None) -> str | None:
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(repo_id, revision=revision, local_files_only=True)
    except Exception:  # noqa: BLE001 - not in the local cache (or no such repo): the real run says which
        return None
