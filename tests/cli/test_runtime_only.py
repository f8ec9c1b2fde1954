"""Only runtime code ships (issue 39 item 5): no public name under langadapt/ is there for the tests
or the benchmarks alone.

A public name is a module-level function, class or constant of a langadapt/ module whose name does
not start with `_`. One that tests/ or benchmarks/ use must also be used by the runtime: a module
of langadapt/ (its own module included: a helper the module calls is runtime code), the repository's
other code (the corpus builder, lm-eval's task loader, the notebooks), the CLI entry point of
pyproject.toml; or be a package's public API (listed in an `__init__`'s `__all__`: `langadapt`'s,
`langadapt.planning`'s, ...) or promised as a library entry point by README.md's "Using it as a
library" section. Otherwise it belongs in tests/helpers/ (tests; benchmarks import
it from there too, as they do `helpers.synthetic`) or in the benchmark that uses it, or it is made
private. What stays anyway is in ALLOWED, one line of reason each.

Uses are read with `ast`, no project code run, and resolved to the module that defines the name:
`from langadapt.x import name`, `module.name` through an imported module (or an alias of it), a
bare name in its own module, a package re-export, `getattr(module, "name")` and
`monkeypatch.setattr(module, "name", ...)`, a dotted string `"langadapt.x.name"` (mock.patch), and
`importlib.import_module(...).name` for every module the runtime names in a string (the stage table's
`Entry("langadapt.data.stage", ...)`, which the pipeline calls `.run` on).
"""

from __future__ import annotations

import ast
import functools
import json
import re
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "langadapt"
OTHER_USERS = ("corpora", "eval", "notebooks")
"""The repository's code besides the package that runs as a user's would: corpora/build.py (the demo
corpus and the translation pairs), eval/lm_eval_tasks/ (lm-eval's data loader), the notebooks."""

ALLOWED = {
    ("langadapt.runtime.launch", "write_launch"):
        "library entry point documented in docs/launching.md (\"From Python: write_launch(recipe, out_path, ...)\")",
    ("langadapt.planning.flops", "mfu"):
        "PENDING: train/monitoring/metrics.py computes the same formula inline; it should call this one",
    ("langadapt.runtime.distributed", "is_main"):
        "PENDING: tests only (the runtime reads DistInfo.is_main); make private or move to tests/helpers",
    ("langadapt.runtime.distributed", "destroy"):
        "PENDING: the runtime never tears its process group down; the CLI should call it at exit, or it moves",
    ("langadapt.train.engines.deepspeed_json", "BF16_GRADIENTS"):
        "PENDING: FP32_GRADIENTS' opt-out, for the precision test and train_throughput.py: to tests/helpers",
    ("langadapt.evaluation.training_report", "validation_verdicts"):
        "PENDING: tests only (the texts of validation_findings): make private or inline in the test",
}
"""(module, name) -> why it stays public though only tests or benchmarks use it. PENDING: to move or
make private with the module's next change (issue 39 item 5 left these files to the changes under
way in them then)."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


@functools.cache
def parse(path: Path) -> ast.Module:
    """A .py file, or a notebook's code cells (shell and magic lines left out)."""
    if path.suffix != ".ipynb":
        return ast.parse(path.read_text(encoding="utf-8"))
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    lines = [line for cell in code for line in cell.splitlines() if not line.lstrip().startswith(("%", "!"))]
    return ast.parse("\n".join(lines))


def definitions(tree: ast.Module) -> list[str]:
    """The public module-level names a module defines (`if`/`try` blocks at module level included)."""
    names: list[str] = []
    for node in tree.body:
        for stmt in [node, *(getattr(node, "body", []) if isinstance(node, (ast.If, ast.Try)) else [])]:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.append(stmt.name)
            elif isinstance(stmt, ast.Assign):
                names += [t.id for t in stmt.targets if isinstance(t, ast.Name)]
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                names.append(stmt.target.id)
    return [name for name in names if not name.startswith("_")]


def absolute(source: str | None, node: ast.ImportFrom) -> str:
    """The module an ImportFrom names, relative imports resolved against `source`."""
    if node.level == 0 or source is None:
        return node.module or ""
    base = source.split(".")
    if MODULES[source].name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def exports() -> tuple[dict[tuple[str, str], tuple[str, str]], set[tuple[str, str]]]:
    """What package `__init__` modules re-export: (package, name) -> (module, name) for each import and
    lazy-table entry ({"name": "module"} or {"name": "langadapt.x.module"}); and the public API, the
    names of each `__all__` (as the module that defines them)."""
    found: dict[tuple[str, str], tuple[str, str]] = {}
    listed: set[tuple[str, str]] = set()
    for package, path in MODULES.items():
        if path.name != "__init__.py":
            continue
        for node in ast.walk(parse(path)):
            if isinstance(node, ast.ImportFrom):
                target = absolute(package, node)
                found |= {(package, a.asname or a.name): (target, a.name) for a in node.names
                          if f"{target}.{a.name}" not in MODULES}
            elif isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if isinstance(key, ast.Constant) and isinstance(value, ast.Constant) and isinstance(value.value, str):
                        target = value.value if value.value.startswith("langadapt") else f"{package}.{value.value}"
                        if target in MODULES and target != package:
                            found[(package, key.value)] = (target, key.value)
            elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
                listed |= {(package, item.value) for item in getattr(node.value, "elts", [])
                           if isinstance(item, ast.Constant)}
    return found, listed


EXPORTS, _LISTED = exports()


def canonical(pair: tuple[str, str]) -> tuple[str, str]:
    """A re-exported name as the module that defines it."""
    seen = set()
    while pair in EXPORTS and pair not in seen:
        seen.add(pair)
        pair = EXPORTS[pair]
    return pair


PUBLIC_API = {canonical(pair) for pair in _LISTED}
"""Each package's `__all__`, as the modules that define the names."""


def uses(tree: ast.Module, source: str | None = None) -> set[tuple[str, str]]:
    """(module, name) of every langadapt name `tree` uses (see the module docstring); `source`: the
    langadapt module `tree` is, for its bare names and relative imports."""
    pairs: set[tuple[str, str]] = set()
    aliases: dict[str, str] = {}  # local name -> langadapt module
    nodes = list(ast.walk(tree))
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                aliases[local] = alias.name if alias.asname else local
        elif isinstance(node, ast.ImportFrom):
            module = absolute(source, node)
            for alias in node.names:
                if f"{module}.{alias.name}" in MODULES:
                    aliases[alias.asname or alias.name] = f"{module}.{alias.name}"
                else:
                    pairs.add((module, alias.name))
    named: set[str] = set()  # modules named in a string ("langadapt.data.stage")
    dynamic: set[str] = set()  # attributes taken of importlib.import_module(...)
    for node in nodes:
        if isinstance(node, ast.Attribute):
            chain, base = [], node
            while isinstance(base, ast.Attribute):
                chain.append(base.attr)
                base = base.value
            if isinstance(base, ast.Name) and base.id in aliases:
                module = aliases[base.id]
                for attr in reversed(chain):
                    if f"{module}.{attr}" not in MODULES:
                        pairs.add((module, attr))
                        break
                    module = f"{module}.{attr}"
            elif isinstance(base, ast.Call) and ast.unparse(base.func).endswith("import_module"):
                dynamic.add(chain[-1])
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and source is not None:
            pairs.add((source, node.id))
        elif isinstance(node, ast.Call) and len(node.args) >= 2 and isinstance(node.args[0], ast.Name) \
                and node.args[0].id in aliases and isinstance(node.args[1], ast.Constant) \
                and isinstance(node.args[1].value, str):  # getattr(module, "x"), monkeypatch.setattr(module, "x", ...)
            pairs.add((aliases[node.args[0].id], node.args[1].value))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("langadapt."):
            module, _, name = node.value.rpartition(".")
            if node.value in MODULES:
                named.add(node.value)
            elif module in MODULES:
                pairs.add((module, name))
    pairs |= {(module, attr) for module in named for attr in dynamic}
    return {canonical(pair) for pair in pairs if pair[0].startswith("langadapt")}


def runtime_uses() -> set[tuple[str, str]]:
    """What the runtime uses: every module of the package, the repository's other code, the CLI
    entry point of pyproject.toml, README's library section."""
    pairs = set().union(*(uses(parse(path), name) for name, path in MODULES.items()))
    for folder in OTHER_USERS:
        for path in sorted((REPO / folder).rglob("*")):
            if path.suffix in (".py", ".ipynb"):
                pairs |= uses(parse(path))
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    pairs |= {(module, name) for module, name in (target.split(":") for target in scripts.values())}
    return pairs | readme_library()


def readme_library() -> set[tuple[str, str]]:
    """The names README.md's "Using it as a library" section promises: `langadapt.x.name` and
    `from langadapt.x import a, b`."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Using it as a library"):readme.index("## Layout")]
    pairs = {(module, name) for module, name in
             (dotted.rsplit(".", 1) for dotted in re.findall(r"`(langadapt(?:\.\w+)+)`", section))}
    for module, *names in re.findall(r"from (langadapt[\w.]*) import (?:\(([^)]*)\)|([\w, ]+))", section):
        pairs |= {(module, name.strip()) for name in ",".join(names).split(",") if name.strip()}
    return {canonical(pair) for pair in pairs}


def uses_in_tests_and_benchmarks() -> set[tuple[str, str]]:
    """What tests/ and benchmarks/ use."""
    files = [*(REPO / "tests").rglob("*.py"), *(REPO / "benchmarks").rglob("*.py")]
    return set().union(*(uses(parse(path)) for path in files))


def only_for_tests() -> dict[tuple[str, str], str]:
    """(module, name) -> file, for each public name tests or benchmarks use and the runtime does not."""
    runtime, tested = runtime_uses(), uses_in_tests_and_benchmarks()
    found = {}
    for module, path in sorted(MODULES.items()):
        for name in definitions(parse(path)):
            pair = (module, name)
            if pair in tested and pair not in runtime and pair not in PUBLIC_API:
                found[pair] = str(path.relative_to(REPO))
    return found


@pytest.mark.slow  # parses every module, test and benchmark: ~7 s on a loaded 2-core machine
def test_no_public_name_is_there_for_the_tests_or_benchmarks_alone() -> None:
    found = only_for_tests()
    unexplained = sorted(f"{path}: {name}" for (module, name), path in found.items() if (module, name) not in ALLOWED)
    assert not unexplained, (
        "public names that only tests/ or benchmarks/ use: move each to tests/helpers/ (or the benchmark that "
        f"uses it), make it private, or say in ALLOWED why it stays: {unexplained}")
    stale = sorted(f"{module}.{name}" for module, name in ALLOWED if (module, name) not in found)
    assert not stale, f"ALLOWED names that are gone or used by the runtime now: drop them: {stale}"


def test_the_finder_resolves_each_form_of_use() -> None:
    source = ("import importlib\nfrom langadapt.runtime import distributed as D\nimport langadapt.data.stream\n"
              "from langadapt.planning.flops import mfu\nfrom langadapt import fit\n"
              "D.free_port()\nlangadapt.data.stream.build_stream()\ngetattr(D, 'barrier')\n"
              "mock.patch('langadapt.train.loop.TrainResult')\n"
              "x = 'langadapt.data.stage'\nimportlib.import_module(x).run\n")
    assert uses(ast.parse(source)) == {
        ("langadapt.runtime.distributed", "free_port"), ("langadapt.data.stream", "build_stream"),
        ("langadapt.runtime.distributed", "barrier"), ("langadapt.planning.flops", "mfu"),
        ("langadapt.train.loop", "fit"), ("langadapt.train.loop", "TrainResult"), ("langadapt.data.stage", "run")}
    assert uses(ast.parse("def f():\n    return helper()\n"), "langadapt.x") >= {("langadapt.x", "helper")}
    assert definitions(ast.parse("A = 1\n_b = 2\ndef f(): ...\nclass C: ...\nif X:\n    D: int = 3\n")) == \
        ["A", "f", "C", "D"]
    assert ("langadapt.train.loop", "fit") in PUBLIC_API and ("langadapt.planning.plan", "build_plan") in PUBLIC_API


def test_the_moved_test_support_stays_out_of_the_package() -> None:
    """issue 39 item 5's pieces: the synthetic model and stream, the GPU suite's test names, the
    environment the tests strip, the warm-vs-cold benchmark's dims: in tests/helpers/ or the benchmark."""
    assert "langadapt.train.synthetic" not in MODULES
    gone = {"langadapt.planning.gpu_record": {"GPU_TEST_FOR", "GPU_DEFAULT_TESTS", "FAST_PATH_LAYOUTS"},
            "langadapt.runtime.distributed": {"EXPORTED_ENV_VARS"}, "langadapt.evaluation.cold_twin": {"model_dims"}}
    still = {f"{module}.{name}" for module, names in gone.items() for name in names & set(definitions(parse(MODULES[module])))}
    assert not still, still
