"""The house plan holds (docs/architecture.md): a small package root and no import circles.

Imports are read with `ast`, function-level (lazy) imports included: a circle closed by a lazy
import still makes two modules impossible to understand, move or test apart. Imports under
`if TYPE_CHECKING:` never run and are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "langadapt"
ROOT_MODULES = {"__init__.py", "cli.py", "errors.py", "ioerrors.py", "modeling.py"}


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


STAGES = {"data", "tokenizer", "embeddings", "train", "evaluation", "export"}
ABOVE_STAGES = {"pipeline", "experiments"}  # the runner and preflight; sweeps and the frontier over runs
FORBIDDEN = {
    **{stage: ABOVE_STAGES for stage in STAGES},  # a stage never runs the pipeline
    "data": {"planning"} | ABOVE_STAGES,  # data plans its own mixture (data.epochs)
    "corpora": {"data", "planning", "train", "run"} | ABOVE_STAGES,  # corpora builds the files data reads
    "planning": {"train", "evaluation", "export"} | ABOVE_STAGES,  # plan reads recipes and shapes, never the trainer
    "evaluation": {"train", "export"} | ABOVE_STAGES,
    "export": {"evaluation"} | ABOVE_STAGES,
    "recipe": STAGES | {"run", "runtime", "planning", "corpora"} | ABOVE_STAGES,  # the schema: below everything it configures
    "run": STAGES | {"planning"} | ABOVE_STAGES,  # the run contract the stages share: below every stage
    "runtime": STAGES | {"run", "planning"} | ABOVE_STAGES,  # where this process runs: below the run contract
    "pipeline": {"experiments"},  # drivers over several runs stand above the one-run pipeline
}
"""package -> packages it must not import, with no exemption: every stage's settings and slice live in
`recipe` (recipe/data.py, recipe/train.py, ...), below every package they configure.
`planning` stands below `train`: the trainer reads its formulas (FLOPs, the hardware's peak) and its
resolver of what a stage runs with (`planning.training`), which `plan`, the preflight check and the
cold twin read too, without torch (`test_planning_imports_no_torch`). export may use
train.checkpoint's reader (an earlier stage's library, docs/architecture.md); nothing else of train."""


def test_no_forbidden_arrows():
    package = lambda module: module.split(".")[1] if module.count(".") else ""
    wrong = sorted(f"{src} -> {dst}" for src, dsts in import_graph().items() for dst in dsts
                   if package(dst) in FORBIDDEN.get(package(src), ()))
    wrong += sorted(f"{src} -> {dst}" for src, dsts in import_graph().items() for dst in dsts
                    if package(src) == "export" and package(dst) == "train"
                    and dst not in ("langadapt.train.checkpoint", "langadapt.recipe.train"))
    assert not wrong, wrong


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
    assert importers == {"langadapt.cli", "langadapt.experiments.frontier"}


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
