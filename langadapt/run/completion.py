"""How a stage folder becomes complete, and how the pipeline knows it is: manifest first, marker last.

`prepare_stage_dir` readies a stage's folder (keeping partial work of the same fingerprint, for a
training stage's resume), the other ranks `wait_for_fingerprint` until rank 0 did, `write_manifest`
writes the manifest and then the `COMPLETE` marker, and `is_complete` reads them back (the manifest
through `run.layout.read_manifest`, its one reader). A stage re-run with a different fingerprint is
built in a sibling work folder and swapped in only when complete (`promote`); `recover` finishes a
swap a crash interrupted. Where these files and folders are is `run.layout`'s: this module only
decides when they are written.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from langadapt.run.layout import FINGERPRINT, MANIFEST, MARKER, STAGES, RunLayout, read_manifest

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


def is_complete(stage_dir: Path, fingerprint: str | None = None) -> bool:
    """Done, and (if given) done with these exact inputs."""
    if not (stage_dir / MARKER).is_file():
        return False
    return fingerprint is None or read_manifest(stage_dir).get("fingerprint") == fingerprint


def has_partial(stage_dir: Path, fingerprint: str) -> bool:
    marker = stage_dir / FINGERPRINT
    return marker.is_file() and marker.read_text().strip() == fingerprint


def prepare_stage_dir(stage_dir: Path, fingerprint: str, keep_partial: bool = True) -> bool:
    """Make the folder ready to run; returns True when it kept earlier partial work (resume).

    `keep_partial` False starts over even from partial work of the same inputs (a forced re-run)."""
    (stage_dir / MARKER).unlink(missing_ok=True)
    if keep_partial and has_partial(stage_dir, fingerprint):
        return True
    if stage_dir.exists():
        shutil.rmtree(stage_dir)
    stage_dir.mkdir(parents=True)
    (stage_dir / FINGERPRINT).write_text(fingerprint)
    return False


def promote(work: Path, final: Path, retired: Path) -> None:
    """Swap a complete work folder into place; the previous output is deleted only after that.

    Two renames: a crash between them leaves `final` missing and both the old (`retired`) and the
    new (`work`, complete) output on disk, which `recover` sorts out at the next start."""
    if retired.exists():
        shutil.rmtree(retired)
    if final.exists():
        os.replace(final, retired)
    os.replace(work, final)
    shutil.rmtree(retired, ignore_errors=True)


def recover(layout: RunLayout) -> None:
    """Finish a swap that a crash interrupted (see `promote`)."""
    for stage in STAGES:
        final, work, retired = layout.stage_dir(stage), layout.work_dir(stage), layout.retired_dir(stage)
        if final.exists():
            shutil.rmtree(retired, ignore_errors=True)
        elif is_complete(work):
            os.replace(work, final)
            shutil.rmtree(retired, ignore_errors=True)
        elif retired.exists():
            os.replace(retired, final)


def wait_for_fingerprint(stage_dir: Path, fingerprint: str, timeout_s: float = 600.0) -> None:
    """Non-zero ranks wait until rank 0 has prepared the stage folder (a TimeoutError if it never does)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if has_partial(stage_dir, fingerprint):
            return
        time.sleep(0.5)
    raise TimeoutError(f"rank 0 did not prepare {stage_dir} within {timeout_s:.0f} s")


def write_manifest(stage_dir: Path, manifest: dict[str, Any]) -> None:
    """Manifest first, marker last: a crash between the two leaves the stage incomplete."""
    tmp = stage_dir / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
    os.replace(tmp, stage_dir / MANIFEST)
    (stage_dir / MARKER).write_text(time.strftime("%Y-%m-%dT%H:%M:%S%z") + "\n")
