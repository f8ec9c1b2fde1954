"""Where the base (source) model comes from: a local folder, built by its own recipe, or the Hub.

The pipeline runs the base's own recipe first when its folder is missing (`base_build`), then
resolves it before fingerprinting: a stage's fingerprint hashes the base model's
files, so they must exist first (see `fingerprint`). `weights_problem` checks its safetensors
weights from their headers and sizes (the preflight check, and every folder resolved here).
"""

from __future__ import annotations

import json
from pathlib import Path

from langadapt.errors import LangadaptError
from langadapt.ioerrors import input_problem, read_input_text
from langadapt.recipe import LoadedRecipe, Recipe, load_recipe


def base_build(recipe: Recipe) -> LoadedRecipe | None:
    """The base model's own recipe when its folder is missing and `base_model.build_recipe` says how
    to make it: the pipeline runs it first, as a run of its own in its own run directory (the demo's
    English base). None when there is nothing to build."""
    spec = recipe.base_model
    if spec.path is None or not spec.build_recipe or Path(spec.path).is_dir():
        return None
    return load_recipe(spec.build_recipe)


def resolve_base_model(recipe: Recipe, fetch: bool) -> str | None:
    """A local folder for the base model: as given (built already by `base_build`'s run), or from the Hub.

    With fetch=False (dry runs, fingerprints) nothing is downloaded: None when it is not on this
    machine yet. With fetch=True a missing folder is an error and a Hub id is downloaded, and the
    weights found are checked (`weights_problem`)."""
    folder = _resolve(recipe, fetch)
    if folder is not None and fetch and (problem := weights_problem(Path(folder))):
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
        except Exception as exc:  # network, auth, missing repo: all user-fixable
            raise LangadaptError(hub_failure(spec.path, exc)) from None
    raise LangadaptError(f"base_model.path {spec.path}: folder not found")


def hub_offline() -> bool:
    """Whether the Hub is switched off here (HF_HUB_OFFLINE=1, as on a compute node without network)."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def not_cached_line(repo_id: str, why: str) -> str:
    """Why a Hub id that is not on this machine cannot be used from here (the key is the caller's to name)."""
    return (f"{repo_id} is not in the local Hugging Face cache, and {why}: fetch it where "
            f"there is network with `huggingface-cli download {repo_id}` (into this HF_HOME), or point "
            "base_model.path at a model folder")


def hub_failure(repo_id: str, exc: Exception) -> str:
    """Why a Hub download failed, as the user can act on it.

    Offline, huggingface_hub raises LocalEntryNotFoundError ("cannot find the requested files in
    the disk cache"), whose class name alone read like a broken cache or a missing repository."""
    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled

    if hub_offline() or isinstance(exc, OfflineModeIsEnabled):
        return f"base_model.path: {not_cached_line(repo_id, 'HF_HUB_OFFLINE=1 keeps the Hub out of reach')}"
    if isinstance(exc, LocalEntryNotFoundError):
        return f"base_model.path: {not_cached_line(repo_id, 'the Hub cannot be reached (no network?)')}"
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


SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"


def weights_problem(folder: Path) -> str | None:
    """Why the safetensors weights in `folder` cannot be loaded, from headers and file sizes alone.

    A `model.safetensors` cut short by an interrupted copy passes every existence check and fails
    only when a stage loads it, after data and tokenizer have run. `safe_open` parses the header
    and requires that the header length plus the largest `data_offsets` end is the file size; no
    tensor is read. A sharded model's index must name shards that all exist and pass the same
    check. None when fine, or when the folder has no safetensors weights (`pytorch_model.bin`)."""
    single, index = folder / SAFETENSORS, folder / SAFETENSORS_INDEX
    if single.exists():
        return _safetensors_problem(single)
    if index.exists():
        return _index_problem(index)
    return None


def _index_problem(index: Path) -> str | None:
    try:
        weight_map = json.loads(read_input_text(index, str(index)))["weight_map"]
        shards = sorted(set(weight_map.values()))
    except LangadaptError as exc:
        return str(exc).removeprefix(f"{index}: ")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"{index} is not a safetensors index (no weight_map of tensor -> shard file: {type(exc).__name__})"
    if not shards:
        return f"{index} names no shard files"
    missing = [shard for shard in shards if not (index.parent / shard).exists()]
    if missing:
        return f"{index} names shard {missing[0]}, which is missing" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
    return next((p for p in (_safetensors_problem(index.parent / s) for s in shards) if p), None)


def _safetensors_problem(path: Path) -> str | None:
    if problem := input_problem(path):
        return problem
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="np"):
            pass
    except Exception as exc:  # noqa: BLE001 - SafetensorError (a truncated or garbled header), OSError
        return f"{path} is truncated or corrupt ({' '.join(str(exc).split())}): copy or download it again"
    return None
