"""Import a script of benchmarks/ as a module (benchmarks/ is not a package), for tests of its pure
parts and for the test that every benchmark imports (tests/benchmarks/test_benchmark_smoke.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load_benchmark(name: str) -> ModuleType:
    """benchmarks/<name>.py executed as the module `name`, registered in sys.modules while and after
    it runs: a dataclass with postponed annotations looks its module up there as it is made, and
    one benchmark imports another by name (embedding_init: `from embedding_peers import ...`).
    Each call executes the file afresh."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    if spec is None or spec.loader is None:
        raise FileNotFoundError(BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
