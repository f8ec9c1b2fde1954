"""The run directory contract: one folder per stage, a manifest, then a completion marker.

    runs/<name>/recipe.resolved.yaml
    runs/<name>/<stage>/...artifacts...
    runs/<name>/<stage>/manifest.json   inputs, fingerprint, versions, timings, stage summary
    runs/<name>/<stage>/COMPLETE        written last: only its presence means "done"

A stage's fingerprint hashes its recipe sections, the seed, its input files and the fingerprint
of the stage before it, so a change anywhere upstream re-runs everything downstream. A stage
that is re-run with a different fingerprint starts from an empty folder; one re-run with the same
fingerprint (after a crash or a requeue) keeps its folder so training can resume its checkpoints.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import time
from importlib import metadata
from pathlib import Path
from typing import Any

MARKER = "COMPLETE"
MANIFEST = "manifest.json"
FINGERPRINT = ".fingerprint"
TRACKED_PACKAGES = ("langadapt", "torch", "transformers", "tokenizers", "datasets", "deepspeed", "pydantic")


def library_versions() -> dict[str, str]:
    """Versions of the libraries that decide a run's numbers."""
    versions = {"python": platform.python_version()}
    for name in TRACKED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def hash_json(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def file_fingerprints(paths: list[Path]) -> dict[str, list[int]]:
    """(size, mtime) per file: cheap enough for 100 GB corpora, and catches every rewrite in practice."""
    prints: dict[str, list[int]] = {}
    for path in paths:
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for f in files:
            if f.exists():
                stat = f.stat()
                prints[str(f)] = [stat.st_size, stat.st_mtime_ns]
    return prints


def is_complete(stage_dir: Path, fingerprint: str | None = None) -> bool:
    """Done, and (if given) done with these exact inputs."""
    if not (stage_dir / MARKER).is_file():
        return False
    if fingerprint is None:
        return True
    try:
        return json.loads((stage_dir / MANIFEST).read_text())["fingerprint"] == fingerprint
    except (OSError, ValueError, KeyError):
        return False


def prepare_stage_dir(stage_dir: Path, fingerprint: str) -> bool:
    """Make the folder ready to run; returns True when it kept earlier partial work (resume)."""
    (stage_dir / MARKER).unlink(missing_ok=True)
    previous = stage_dir / FINGERPRINT
    if previous.is_file() and previous.read_text().strip() == fingerprint:
        return True
    if stage_dir.exists():
        shutil.rmtree(stage_dir)
    stage_dir.mkdir(parents=True)
    previous.write_text(fingerprint)
    return False


def wait_for_fingerprint(stage_dir: Path, fingerprint: str, timeout_s: float = 600.0) -> bool:
    """Non-zero ranks wait until rank 0 has prepared the stage folder."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        marker = stage_dir / FINGERPRINT
        if marker.is_file() and marker.read_text().strip() == fingerprint:
            return True
        time.sleep(0.5)
    raise TimeoutError(f"rank 0 did not prepare {stage_dir} within {timeout_s:.0f} s")


def write_manifest(stage_dir: Path, manifest: dict[str, Any]) -> None:
    """Manifest first, marker last: a crash between the two leaves the stage incomplete."""
    tmp = stage_dir / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
    os.replace(tmp, stage_dir / MANIFEST)
    (stage_dir / MARKER).write_text(time.strftime("%Y-%m-%dT%H:%M:%S%z") + "\n")
