"""The house plan holds (docs/architecture.md): a small package root and no import circles.

Imports are read with `ast`, function-level (lazy) imports included: a circle closed by a lazy
import still makes two modules impossible to understand, move or test apart. Imports under
`if TYPE_CHECKING:` never run and are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "langadapt"
ROOT_MODULES = {"__init__.py", "errors.py", "ioerrors.py", "modeling.py"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_nodes(tree: ast.AST):
    """Every node except those under `if TYPE_CHECKING:`."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in [child, *_runtime_nodes(child)])
            continue
        yield node
        yield from _runtime_nodes(node)


def import_graph() -> dict[str, set[str]]:
    """Module -> the langadapt modules it imports (`from pkg import submodule` counts as the submodule)."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("langadapt"):
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    targets.add(sub if sub in modules else node.module)
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name.startswith("langadapt")}
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a list of modules, or None (depth-first search)."""
    state: dict[str, int] = {}  # 1 on the current path, 2 finished
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_the_package_root_holds_only_the_entry_points():
    assert {p.name for p in PACKAGE.glob("*.py")} <= ROOT_MODULES


def test_no_import_circles():
    cycle = find_cycle(import_graph())
    assert cycle is None, " -> ".join(cycle)


LAYERS: list[set[str]] = [
    {"errors"}, {"ioerrors"}, {"inputs"}, {"recipe"}, {"runtime"}, {"run"}, {"corpora", "modeling"}, {"data"}, {"tokenizer"},
    {"planning"}, {"embeddings"}, {"train", "evaluation", "export"}, {"pipeline"}, {"experiments"}, {"cli"},
]
"""The packages (and root modules) bottom to top. An import may only point to a lower layer: never
up, never sideways within a layer (the three last stages are siblings). `recipe` stands below
every package it configures (each stage's settings and slice live there); `planning` below
`embeddings` and the training stages, which read its formulas and resolver, without torch."""

SIDEWAYS_KEPT = {("export", "langadapt.train.checkpoint"):
                 "`export --checkpoint` turns a training checkpoint into a model folder; the three engines' "
                 "checkpoint formats are train's to read"}
"""(package, module it imports within its own layer): the named exceptions, with the reason."""

STAGE_RUNNERS = {"pipeline", "cli"}
"""Who may import a stage's `stage` module (its entry point and what only the stage uses): the
runner that schedules stages and the CLI's `export --checkpoint`. Others use the stage's library modules."""


def package(module: str) -> str:
    return module.split(".")[1]


def layer_of(name: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if name in layer)


def test_every_package_has_a_layer():
    packages = {package(m) for m in import_graph() if m != "langadapt"}
    assert packages == set().union(*LAYERS), packages ^ set().union(*LAYERS)


def arrows_not_down(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{src} -> {dst}" for src, dsts in graph.items() if src != "langadapt" for dst in dsts
                  if package(src) != package(dst) and layer_of(package(dst)) >= layer_of(package(src))
                  and (package(src), dst) not in SIDEWAYS_KEPT)


def test_every_arrow_points_down():
    assert not arrows_not_down(import_graph())


def test_an_arrow_up_or_sideways_is_found():
    assert arrows_not_down({"langadapt.data.stage": {"langadapt.tokenizer.train"}})  # up: the example
    assert arrows_not_down({"langadapt.evaluation.x": {"langadapt.train.fit"}})  # sideways
    assert not arrows_not_down({"langadapt.export.x": {"langadapt.train.checkpoint", "langadapt.run.layout"}})


def test_no_module_imports_another_packages_private_names_or_stage_module():
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        src = module_name(path)
        for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("langadapt.")):
                continue
            if src == "langadapt" or package(node.module) == package(src):
                continue
            wrong += [f"{src}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
            if node.module.endswith(".stage") and package(src) not in STAGE_RUNNERS:
                wrong.append(f"{src}: {node.module} (a stage module)")
    assert not wrong, wrong


def test_the_architecture_document_lists_these_layers():
    """docs/architecture.md states the layers in one line, top to bottom, as LAYERS does."""
    doc = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    line = next(line for line in doc.splitlines() if line.startswith("Layers, top to bottom: "))
    stated = [{name.strip(" `.") for name in tier.split(",")} for tier in line.split(": ", 1)[1].split(" > ")]
    assert stated == LAYERS[::-1], stated


def test_planning_imports_no_torch():
    """`langadapt plan`, the preflight check and every refusal read planning (the resolver, the
    formulas) and the recipe without loading torch."""
    import subprocess
    import sys

    modules = sorted(m for m in import_graph() if m.startswith("langadapt.planning")) + ["langadapt.recipe.train"]
    probe = "import sys; import " + ", ".join(modules) + "; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_only_entry_points_start_a_pipeline():
    """A run is a graph the pipeline schedules (base-model build and cold twin included): no stage
    and no helper starts a pipeline of its own from inside (docs/architecture.md)."""
    importers = {src for src, dsts in import_graph().items() if "langadapt.pipeline.runner" in dsts}
    assert {"langadapt.cli" if package(src) == "cli" else src for src in importers} == {
        "langadapt.cli", "langadapt.experiments.frontier"}


def test_the_cycle_finder_finds_a_lazy_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    source = "def f():\n    from langadapt.run import pipeline\nif TYPE_CHECKING:\n    from langadapt.recipe import x\n"
    seen = [n.module for n in _runtime_nodes(ast.parse(source)) if isinstance(n, ast.ImportFrom)]
    assert seen == ["langadapt.run"]


def test_nothing_cites_a_document_outside_the_repository():
    """Comments and docstrings may cite docs/ (in the repository), not the design card a checkout lacks."""
    outside = ("DESIGN.md", "STYLE.md")
    files = [*PACKAGE.rglob("*.py"), *(PACKAGE.parent / "recipes").rglob("*.yaml"), *(PACKAGE.parent / "docs").rglob("*.md")]
    citing = [f"{f.relative_to(PACKAGE.parent)}: {name}" for f in files for name in outside if name in f.read_text()]
    assert not citing, citing
