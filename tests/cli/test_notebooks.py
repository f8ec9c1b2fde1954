"""notebooks/ run top to bottom (nbclient, a real Jupyter kernel): a cell that errors fails the test.

They need ../shared (tiny-en-llama and the corpora), found the way the notebooks find it; the
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


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_without_errors(path: Path, tiny_en_llama: Path, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import nbclient  # the dev extra installs nbclient, nbformat and ipykernel (the python3 kernel)
    import nbformat

    monkeypatch.setenv("LANGADAPT_SHARED", str(tiny_en_llama.parents[1]))
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
