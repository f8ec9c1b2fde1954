"""The tests are grouped as the code is: tests/<package>/ for each langadapt sub-package (the
folder's tests are that package's), a few folders that are not packages, and one conftest.py of
shared fixtures.

pytest imports the test files in its default `prepend` mode with no `__init__.py` in the test
folders: every folder is put on sys.path and a test module is imported by its file name, so two
test files with the same name in different folders would clash, and the files of a folder import
each other by name (`from test_train_resume import stage_config`). tests/helpers/ is the one
package (`from helpers.cli import run_cli`), found because tests/ is on sys.path (tests/conftest.py).
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
PACKAGE = TESTS.parent / "langadapt"
EXTRA_FOLDERS = {
    "cli": "the CLI, the root modules (errors, ioerrors, modeling), the library API, the notebooks, "
           "and the repository-wide checks (architecture, schema imports, this one)",
    "bad_inputs": "the catalogue of bad recipes and input files through the real CLI (issue 23)",
    "gpu": "the GPU suite (tests/gpu/run.sh), skipped with the reason without a GPU",
    "benchmarks": "the scripts of benchmarks/: each imports and runs in its --smoke size (issue 39)",
}
CONFTESTS = {
    "conftest.py": "the shared fixtures",
    "gpu/conftest.py": "marks and skips the GPU suite (no fixtures)",
}


def all_test_files() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def is_subpackage(parts: tuple[str, ...]) -> bool:
    return (PACKAGE.joinpath(*parts) / "__init__.py").is_file()


def test_every_test_file_sits_in_the_folder_of_a_package_or_an_allowed_one():
    misplaced = []
    for path in all_test_files():
        folder = path.parent.relative_to(TESTS).parts
        if not folder:
            misplaced.append(f"{path.name}: directly in tests/")
        elif not (folder in {(name,) for name in EXTRA_FOLDERS} or is_subpackage(folder)):
            misplaced.append(f"{path.relative_to(TESTS)}: tests/{'/'.join(folder)} is not a langadapt "
                             f"sub-package nor one of {sorted(EXTRA_FOLDERS)}")
    assert not misplaced, "move each test file into tests/<package it tests>/:\n" + "\n".join(misplaced)


def test_test_file_names_are_unique_and_test_folders_are_not_packages():
    """`prepend` import mode imports a test module by its file name: a second one of the same name
    would be an import error (or, with `__init__.py` files, a different scheme for some folders)."""
    counts = Counter(path.name for path in all_test_files())
    assert not [name for name, n in counts.items() if n > 1]
    packages = sorted(str(p.parent.relative_to(TESTS)) for p in TESTS.rglob("__init__.py"))
    assert packages == ["helpers"], packages


def test_a_test_file_imports_test_files_of_its_own_folder_only():
    """Only a test file's own folder is sure to be on sys.path when pytest runs that folder (or that
    file) alone; a helper two folders share belongs in tests/helpers/."""
    wrong = []
    for path in all_test_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
            wrong += [f"{path.relative_to(TESTS)} imports {name}" for name in names
                      if name.startswith("test_") and not (path.parent / f"{name}.py").is_file()]
    assert not wrong, wrong


def test_shared_fixtures_are_in_one_conftest():
    found = {str(p.relative_to(TESTS)) for p in TESTS.rglob("conftest.py")}
    assert found == set(CONFTESTS), found


def test_the_guard_knows_the_packages():
    assert is_subpackage(("train",)) and is_subpackage(("train", "engines")) and is_subpackage(("corpora",))
    assert not is_subpackage(("helpers",)) and not is_subpackage(("golden",))
    assert {p.parent.name for p in all_test_files()} >= {"recipe", "run", "data", "train", "cli"}
