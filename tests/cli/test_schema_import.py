"""Loading a recipe never imports torch or transformers, so a bad recipe errors at once.

Importing torch + transformers costs ~4.5 s on the development machine; before this was fixed
every CLI error, even "file not found", waited for it. Each check runs in a fresh interpreter
(this test process has long imported torch).
"""

from __future__ import annotations

import subprocess
import sys
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

