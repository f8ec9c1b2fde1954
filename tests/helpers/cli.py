"""The CLI as a user runs it: `python -m langadapt.cli ARGS` in a fresh process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str, cwd: Path = REPO, timeout: float = 120) -> subprocess.CompletedProcess:
    """`langadapt ARGS` from `cwd` (the repository by default), output captured as text; a hang
    fails at `timeout` seconds (callers pass what their slowest command needs)."""
    return subprocess.run([sys.executable, "-m", "langadapt.cli", *args], check=False, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


TORCH_PROBE = """
import atexit, os, sys
atexit.register(lambda: open(os.environ["LANGADAPT_TEST_PROBE"], "w").write(str("torch" in sys.modules)))
from langadapt.cli import main
sys.exit(main(sys.argv[1:]))
"""
"""`python -m langadapt.cli`, writing at exit whether torch was imported: a preflight refusal comes
before any stage, and every stage that trains or evaluates imports torch (~3 CPU s)."""


def run_cli_probing_torch(*args: str, cwd: Path = REPO, timeout: float = 120) -> tuple[subprocess.CompletedProcess, bool]:
    """`run_cli`, and whether the process imported torch (asserted exactly, where a CPU-time bound
    measured the neighbours on a loaded 2-core machine)."""
    probe = Path(os.environ.get("TMPDIR", "/tmp")) / f"langadapt-probe-{os.getpid()}"
    probe.unlink(missing_ok=True)
    result = subprocess.run([sys.executable, "-c", TORCH_PROBE, *args], check=False, cwd=cwd, capture_output=True,
                            text=True, timeout=timeout, env={**os.environ, "LANGADAPT_TEST_PROBE": str(probe)})
    imported_torch = probe.read_text() == "True"
    probe.unlink()
    return result, imported_torch
