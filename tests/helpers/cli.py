"""The CLI as a user runs it: `python -m langadapt.cli ARGS` in a fresh process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str, cwd: Path = REPO, timeout: float = 120) -> subprocess.CompletedProcess:
    """`langadapt ARGS` from `cwd` (the repository by default), output captured as text; a hang
    fails at `timeout` seconds (callers pass what their slowest command needs)."""
    return subprocess.run([sys.executable, "-m", "langadapt.cli", *args], check=False, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)
