"""Submitting a generated sbatch script, for the real-Slurm tests (users run `sbatch` themselves)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from helpers.job_env import inherited_env
from langadapt.errors import LangadaptError


def submit(script: str | Path) -> str:
    """`sbatch --parsable SCRIPT`; returns the job id.

    sbatch hands the submitter's environment to the job: a process that ran a training engine
    itself (a notebook, a test) carries RANK=0, WORLD_SIZE=1, MASTER_PORT=..., which the job's
    tasks would read as their own place (one rank each, never forming the group). Those are
    left out (helpers.job_env.EXPORTED_ENV_VARS)."""
    env = inherited_env()
    try:
        done = subprocess.run(
            ["sbatch", "--parsable", str(script)], capture_output=True, text=True, check=False, env=env
        )
    except FileNotFoundError:
        raise LangadaptError(f"sbatch {script}: sbatch not found (not on a Slurm login node?)") from None
    if done.returncode != 0:
        raise LangadaptError(f"sbatch {script} failed: {done.stderr.strip()}")
    return done.stdout.strip().split(";")[0]
