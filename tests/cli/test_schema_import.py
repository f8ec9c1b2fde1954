"""Loading a recipe never imports torch or transformers, so a bad recipe errors at once.

Importing torch + transformers costs ~4.5 s on the development machine; before this was fixed
every CLI error, even "file not found", waited for it. Each check runs in a fresh interpreter
(this test process has long imported torch).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HEAVY = ("torch", "transformers", "deepspeed", "tokenizers")


def _heavy_modules_after(code: str) -> list[str]:
    probe = f"{code}\nimport sys\nprint(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return [m for m in out.stdout.strip().splitlines()[-1].split(",") if m] if out.stdout.strip() else []


def test_importing_the_schema_imports_no_torch() -> None:
    assert _heavy_modules_after("import langadapt.recipe") == []


def test_importing_the_preflight_and_the_planner_imports_no_torch() -> None:
    assert _heavy_modules_after("import langadapt.pipeline.preflight, langadapt.planning.recipe_plan") == []


def test_cli_error_on_a_bad_recipe_imports_no_torch(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nfoo: 1\n")
    code = (
        "import contextlib, io\nfrom langadapt.cli import main\n"
        f"with contextlib.redirect_stderr(io.StringIO()):\n    assert main(['run', {str(bad)!r}]) == 2"
    )
    assert _heavy_modules_after(code) == []


def test_cli_error_on_a_bad_recipe_is_fast(tmp_path: Path) -> None:
    """Measured 0.55 s on the idle 2-core machine; the bound leaves room for a busy one."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nfoo: 1\n")
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "langadapt.cli", "run", str(bad)], capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and proc.stderr.startswith("langadapt: error:")
    assert elapsed < 3.0, f"a recipe error took {elapsed:.2f} s"
