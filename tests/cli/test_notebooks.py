"""notebooks/ run top to bottom (nbclient, a real Jupyter kernel): a cell that errors fails the test.

They need ../shared (tiny-en-llama and the corpora), found the way the notebooks find it; without it
the vocabulary notebook takes the demo's own base and data split (tested where those are built); the
kernel imports this checkout (PYTHONPATH), and LANGADAPT_RUN is cleared so that the results
notebook makes its own tiny run instead of reading whatever a developer's runs/ holds.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
TIMEOUT_S = 600
"""Per cell; each notebook takes about a minute on an idle 2-core CPU."""


def test_there_are_notebooks() -> None:
    assert [p.name for p in NOTEBOOKS] == ["01_adapt_vocabulary.ipynb", "02_run_results.ipynb"]


def test_the_vocabulary_notebook_keeps_its_outputs() -> None:
    """A reader on GitHub sees what each cell printed without running it."""
    import nbformat

    notebook = nbformat.read(NOTEBOOKS[0], as_version=4)
    assert all(cell.outputs for cell in notebook.cells if cell.cell_type == "code")


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_without_errors(path: Path, tiny_en_llama: Path, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    execute(path, tiny_en_llama.parents[1], tmp_path, monkeypatch)


@pytest.mark.slow
def test_the_vocabulary_notebook_runs_without_shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh clone: the demo's own base and data split. Needs the demo's base built and its corpora
    fetched once (`langadapt run recipes/tiny_english_source.yaml`), which the notebook would do itself
    in minutes and with network: too slow and too networked for a test."""
    from langadapt.recipe import load_recipe

    monkeypatch.chdir(REPO)
    demo = load_recipe("recipes/tiny_norwegian_warm.yaml").recipe
    missing = [p for p in [demo.base_model.path, *(s.path for s in demo.data.sources)] if not Path(str(p)).exists()]
    if missing:
        pytest.skip(f"the demo's base and corpora are not built here ({', '.join(map(str, missing))})")
    execute(NOTEBOOKS[0], tmp_path / "no_shared_here", tmp_path, monkeypatch)


def execute(path: Path, shared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run a notebook top to bottom with `shared` as its ../shared; fails on the first cell error."""
    import nbclient  # the dev extra installs nbclient, nbformat and ipykernel (the python3 kernel)
    import nbformat

    monkeypatch.setenv("LANGADAPT_SHARED", str(shared))
    monkeypatch.setenv("LANGADAPT_RUN", str(tmp_path / "no_run_here"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the notebooks' scratch folders go away with the test
    # One OpenMP thread: on a busy shared CPU, threads that wait for each other at every op are
    # several times slower than one (tests/evaluation/test_eval_stage.py does the same in-process).
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()  # raises CellExecutionError, with the cell and its traceback, on the first error
    errors = [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs
              if out.output_type == "error"]
    assert not errors
    assert any(out.output_type == "stream" for cell in notebook.cells if cell.cell_type == "code"
               for out in cell.outputs), "the notebook printed nothing"
