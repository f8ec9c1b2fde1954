"""`import langadapt` works from a checkout that is only on PYTHONPATH (not pip-installed).

The GPU machine runs the suite that way (tests/gpu/setup.sh puts the checkout on PYTHONPATH): the
version came from installed metadata only, and the first GPU call of 2026-11-28 died at import.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[2]


def test_a_checkout_on_the_path_without_metadata_has_pyproject_version() -> None:
    # -S: no site-packages, so no installed langadapt metadata; the checkout alone is on sys.path.
    code = f"import sys; sys.path.insert(0, {str(REPO)!r}); import langadapt; print(langadapt.__version__)"
    done = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    expected = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    assert done.stdout.strip() == expected
