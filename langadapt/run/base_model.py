"""Where the base (source) model comes from: a local folder, built by its own recipe, or the Hub.

The pipeline runs the base's own recipe first when its folder is missing (`base_build`), then
resolves it before fingerprinting: a stage's fingerprint hashes the base model's
files, so they must exist first (see `fingerprint`). Every folder resolved here is checked by
`inputs.model_folder.model_folder_problem`, the check `langadapt eval` and `export` run on theirs.
"""

from __future__ import annotations

import os
from pathlib import Path

from langadapt.errors import LangadaptError
from langadapt.inputs.model_folder import model_folder_problem
from langadapt.recipe import LoadedRecipe, Recipe, load_recipe
from langadapt.recipe.hints import hub_model_download
from langadapt.run.layout import RunLayout


def base_build(recipe: Recipe) -> LoadedRecipe | None:
    """The base model's own recipe when its folder is missing and `base_model.build_recipe` says how
    to make it: the pipeline runs it first, as a run of its own in its own run directory (the demo's
    English base). None when there is nothing to build."""
    spec = recipe.base_model
    if spec.path is None or not spec.build_recipe or Path(spec.path).is_dir():
        return None
    build = load_recipe(spec.build_recipe)
    if problem := build_target_problem(recipe, build.recipe):
        raise LangadaptError(f"base_model.path: {problem}")
    return build


def build_target_problem(recipe: Recipe, build: Recipe) -> str | None:
    """Why `build` (the recipe `base_model.build_recipe` names) would not make `base_model.path`, or
    None. Checked before anything runs: a path moved by --set while the build recipe still makes the
    old one would otherwise train a whole base and only then find this folder missing."""
    produced = RunLayout(build.run_dir).export.model
    if produced.resolve() == Path(str(recipe.base_model.path)).resolve():
        return None
    return (f"{recipe.base_model.path}: folder not found, and base_model.build_recipe {recipe.base_model.build_recipe} "
            f"makes {produced} instead: set base_model.path to that folder, or build this one first")


def resolve_base_model(recipe: Recipe, fetch: bool) -> str | None:
    """A local folder for the base model: as given (built already by `base_build`'s run), or from the Hub.

    With fetch=False (dry runs, fingerprints) nothing is downloaded: None when it is not on this
    machine yet. With fetch=True a missing folder is an error and a Hub id is downloaded, and what
    the folder holds is checked (`model_folder_problem`: config.json, weights whole, parts in
    agreement); which files a run needs there (weights for `init: warm`, a tokenizer) is the
    preflight check's to say, for the stages it will run."""
    folder = _resolve(recipe, fetch)
    if folder is not None and fetch and (problem := model_folder_problem(Path(folder), weights=False, tokenizer=False)):
        raise LangadaptError(f"base_model.path: {problem}")
    return folder


def _resolve(recipe: Recipe, fetch: bool) -> str | None:
    spec = recipe.base_model
    if spec.path is None:
        return None
    if Path(spec.path).is_dir():
        return spec.path
    hub_id = hub_repo_id(spec.path) is not None
    if not fetch:  # what is on this machine already, nothing built or downloaded
        return hub_cached(spec.path, spec.revision) if hub_id and not spec.build_recipe else None
    if spec.build_recipe:
        raise LangadaptError(f"base_model.build_recipe {spec.build_recipe} did not produce {spec.path}")
    if hub_id:
        from huggingface_hub import snapshot_download

        try:
            return snapshot_download(spec.path, revision=spec.revision)
        except Exception as exc:  # noqa: BLE001  network, auth, missing repo: all user-fixable
            raise LangadaptError(hub_failure(spec.path, exc, spec.revision)) from None
    raise LangadaptError(f"base_model.path {spec.path}: folder not found")


def hub_offline() -> bool:
    """Whether the Hub is switched off here (HF_HUB_OFFLINE=1 or HF_DATASETS_OFFLINE=1, as on a
    compute node without network), read now: the libraries read their flags once, at import."""
    from huggingface_hub import constants

    flags = (os.environ.get(name, "") for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))
    return constants.HF_HUB_OFFLINE or any(f.strip().upper() in ("1", "ON", "YES", "TRUE") for f in flags)


def hub_reachable(repo_id: str, repo_type: str = "model", timeout: float = 5.0) -> bool:
    """Whether the Hub answers about `repo_id`: any HTTP answer counts (a gated or missing repository
    is the download's to report), any failure short of one (DNS, refused, timeout) does not. What
    tells a machine without network from one with it when HF_HUB_OFFLINE is not set."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    try:
        HfApi().repo_info(repo_id, repo_type=repo_type, timeout=timeout)
    except HfHubHTTPError:
        return True
    except Exception:  # noqa: BLE001  the HTTP client's transport errors share no base class with OSError
        return False
    return True


def hub_dataset_cached(path: str) -> bool:
    """Whether `datasets` has a copy of Hub dataset `path`: prepared (its cache) or downloaded (the Hub's)."""
    from datasets import config
    from huggingface_hub import constants

    prepared = Path(config.HF_DATASETS_CACHE) / prepared_folder_name(path)
    downloaded = Path(constants.HF_HUB_CACHE) / f"datasets--{path.replace('/', '--')}" / "snapshots"
    return any(folder.is_dir() and any(folder.iterdir()) for folder in (prepared, downloaded))


def prepared_folder_name(path: str) -> str:
    """The folder `datasets` prepares Hub dataset `path` into, under its cache, and looks for offline:
    the name part in snake case (`uonlp/CulturaX` -> `uonlp___cultura_x`), as
    `datasets.load.CachedDatasetModuleFactory` spells it. `path.replace("/", "___")` missed every
    name with a capital, so a dataset fetched as the hint said was still "not cached"."""
    from datasets.naming import camelcase_to_snakecase

    *namespace, name = path.split("/")
    return "___".join([*namespace, camelcase_to_snakecase(name)])


def not_cached_line(repo_id: str, why: str, revision: str | None = None) -> str:
    """Why a Hub id that is not on this machine cannot be used from here (the key is the caller's to
    name), and the download that puts it where the run looks (`revision`: the recipe's)."""
    return (f"{repo_id} is not in the local Hugging Face cache, and {why}: fetch it where "
            f"there is network with `{hub_model_download(repo_id, revision)}` (into this HF_HOME), or point "
            "base_model.path at a model folder")


def hub_failure(repo_id: str, exc: Exception, revision: str | None = None) -> str:
    """Why a Hub download failed, as the user can act on it.

    Offline, huggingface_hub raises LocalEntryNotFoundError ("cannot find the requested files in
    the disk cache"), whose class name alone read like a broken cache or a missing repository."""
    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled

    if hub_offline() or isinstance(exc, OfflineModeIsEnabled):
        return f"base_model.path: {not_cached_line(repo_id, 'HF_HUB_OFFLINE=1 keeps the Hub out of reach', revision)}"
    if isinstance(exc, LocalEntryNotFoundError):
        why = "the Hub cannot be reached (no network?)"
        return f"base_model.path: {not_cached_line(repo_id, why, revision)}"
    return f"base_model.path {repo_id}: not a local folder and the Hub download failed ({type(exc).__name__}: {exc})".split("\n")[0][:300]


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


def hub_cached(repo_id: str, revision: str | None) -> str | None:
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(repo_id, revision=revision, local_files_only=True)
    except Exception:  # noqa: BLE001 - not in the local cache (or no such repo): the real run says which
        return None
