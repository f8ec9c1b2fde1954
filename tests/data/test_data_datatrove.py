"""The data stage on datatrove writes the bytes of the local engine, resumes task by task, and stops located.

The corpus has exact duplicates across files, pieces and sources (the first copy wins, so the
merge must see the pieces in plan order), a gzip file read whole, line spans of plain files,
Parquet row groups, a held-out file, the cap and the floor; pieces are tiny so that three
datatrove tasks each get several.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

from langadapt.data import pieces, preparation, stage
from langadapt.errors import LangadaptError
from langadapt.recipe.data import UNFINGERPRINTED_FIELDS, DataConfig, DataSlice
from langadapt.run.context import StageContext

pytest.importorskip("datatrove", reason="datatrove is not installed (pip install 'langadapt[prep]'; CI's dev extra has it)")
from langadapt.data import datatrove_engine, datatrove_pieces  # after the skip: the modules need datatrove
from tests.runtime.test_train_launch_slurm import slurm  # noqa: F401  (slurm is a fixture: a usable Slurm or a skip)

pytestmark = pytest.mark.slow
WORDS = ["og", "i", "det", "som", "er", "på", "en", "til", "av", "for", "med", "har", "ikke", "den", "blåbær"]
DATATROVE = {"engine": "datatrove", "datatrove": {"tasks": 3, "workers": 2}}


def _texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 40))) + f" nr {seed}-{i}." for i in range(n)]


def _jsonl(path: Path, rows: list[dict], compress: bool = False) -> None:
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()
    path.write_bytes(gzip.compress(data) if compress else data)


@pytest.fixture()
def corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    monkeypatch.setattr(pieces, "PIECE_BYTES", 2048)
    src = tmp_path / "src"
    src.mkdir()
    a, b = _texts(300, 1), _texts(200, 2)
    dups = a[:30]
    _jsonl(src / "nb-1.jsonl", [{"text": t} for t in a])
    _jsonl(src / "nb-2.jsonl", [{"text": t} for t in b + dups])
    _jsonl(src / "nb-3.jsonl.gz", [{"text": t} for t in _texts(80, 3) + dups[:4]], compress=True)
    (src / "en.txt").write_text("\n".join(_texts(300, 4) + a[:3]) + "\n")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": _texts(200, 5) + a[3:6]}), src / "sv.parquet", row_group_size=30)
    _jsonl(src / "da-valid.jsonl", [{"text": t} for t in _texts(20, 6)])
    _jsonl(src / "da.jsonl", [{"text": t} for t in _texts(150, 7) + _texts(5, 6)])
    return [
        {"name": "nb", "path": str(src / "nb-*.jsonl*"), "lang": "nb", "role": "target"},
        {"name": "en", "path": str(src / "en.txt"), "lang": "en", "role": "replay", "txt_unit": "line"},
        {"name": "sv", "path": str(src / "sv.parquet"), "lang": "sv", "role": "replay", "max_docs": 180},
        {"name": "da", "path": str(src / "da.jsonl"), "valid_path": str(src / "da-valid.jsonl"), "lang": "da",
         "role": "replay"},
    ]


def _config(sources: list[dict], **extra: object) -> DataConfig:
    return DataConfig.model_validate({"sources": sources, "num_workers": 1, "valid_fraction": 0.1,
                                      "max_valid_docs": 20, "min_valid_documents": 3, **extra})


def _run(root: Path, config: DataConfig) -> tuple[dict, dict[str, bytes]]:
    ctx = StageContext(run_dir=root, stage="data", seed=0)
    ctx.out.mkdir(parents=True)
    summary = stage.run(DataSlice(config), ctx)
    files = {str(p.relative_to(ctx.out)): p.read_bytes() for p in sorted(ctx.out.rglob("*")) if p.is_file()}
    return summary, files


def test_datatrove_tasks_write_the_bytes_of_one_local_worker(tmp_path: Path, corpus: list[dict]) -> None:
    one, one_files = _run(tmp_path / "local", _config(corpus))
    assert one["pieces"] > 12, "the corpus must be cut into many pieces for this test to mean anything"
    assert one["sources"]["nb"]["dropped"]["duplicate"] == 34 and one["sources"]["en"]["dropped"]["duplicate"] == 3
    tasks, tasks_files = _run(tmp_path / "dt", _config(corpus, **DATATROVE))
    assert tasks["run"]["engine"] == "datatrove" and tasks["run"]["tasks"] == 3 and tasks["run"]["workers"] == 2
    assert "stats.json" in one_files and sorted(tasks_files) == sorted(one_files)
    for name, data in one_files.items():
        assert tasks_files[name] == data, f"{name} differs between the local engine and datatrove"
    assert {k: v for k, v in tasks.items() if k != "run"} == {k: v for k, v in one.items() if k != "run"}
    assert not list((tmp_path / "dt" / datatrove_pieces.WORK_FOLDER).glob("*/pieces")), "pieces are removed after the merge"


def test_a_rerun_redoes_only_the_task_whose_piece_is_gone(tmp_path: Path, corpus: list[dict]) -> None:
    config = _config(corpus, **DATATROVE)
    jobs, _ = preparation.plan_jobs(config)
    space = datatrove_pieces.workspace(config, jobs, tmp_path / "dt")
    assert datatrove_engine.clean_corpus(config, jobs, space, 2) == 3
    completions = space.clean_logs(3) / "completions"
    assert sorted(p.name for p in completions.iterdir()) == ["00000", "00001", "00002"]
    before = {i: space.piece(i).stat().st_mtime_ns for i in range(len(jobs))}
    gone = datatrove_pieces.task_jobs(1, 3, len(jobs))[1]  # a piece of the middle task
    space.piece(gone).unlink()
    logs = space.clean_logs(3) / "logs"
    ran_before = {p.name: p.stat().st_mtime_ns for p in logs.iterdir()}
    datatrove_engine.clean_corpus(config, jobs, space, 2)
    after = {i: space.piece(i).stat().st_mtime_ns for i in range(len(jobs))}
    assert [i for i in after if after[i] != before[i]] == [gone], "only the deleted piece is cleaned again"
    ran_after = {p.name: p.stat().st_mtime_ns for p in logs.iterdir()}
    assert [name for name in ran_after if ran_after[name] != ran_before[name]] == ["task_00001.log"]
    assert sorted(p.name for p in completions.iterdir()) == ["00000", "00001", "00002"]
    # the stage merges these pieces (nothing left to clean) into the local engine's bytes
    _, resumed = _run(tmp_path / "dt", config)
    _, local = _run(tmp_path / "local", _config(corpus))
    assert resumed == local


def test_a_bad_line_in_one_task_stops_with_file_and_line_and_marks_nothing(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pieces, "PIECE_BYTES", 1024)
    rows = "".join(json.dumps({"text": t}) + "\n" for t in _texts(200, 9))
    bad = tmp_path / "nb.jsonl"
    bad.write_text(rows + rows + "{not json\n" + rows)
    line = 2 * rows.count("\n") + 1
    config = _config([{"name": "nb", "path": str(bad), "lang": "nb", "role": "target"}], **DATATROVE)
    jobs, _ = preparation.plan_jobs(config)
    bad_job = max(i for i, job in enumerate(jobs) if job.piece.span.first_line <= line)  # the piece holding it
    failing = next(rank for rank in range(3) if bad_job in datatrove_pieces.task_jobs(rank, 3, len(jobs)))
    with pytest.raises(LangadaptError, match=rf"line {line} of {bad}"):
        _run(tmp_path / "dt", config)
    out = tmp_path / "dt" / "data"
    assert not list(out.rglob("*.jsonl.gz")) and not (out / "stats.json").exists()
    space = datatrove_pieces.workspace(config, jobs, tmp_path / "dt")
    assert not space.piece(bad_job).exists() and not list(space.root.rglob("*.tmp"))
    assert not (space.clean_logs(3) / "completions" / f"{failing:05d}").exists()


def test_engine_settings_are_in_no_fingerprint(tmp_path: Path) -> None:
    from langadapt.pipeline.stages import stage_table
    from langadapt.recipe import load_recipe
    from langadapt.run.fingerprint import recipe_hash

    assert {"engine", "datatrove"} <= set(UNFINGERPRINTED_FIELDS)
    recipe = tmp_path / "dt.yaml"
    recipe.write_text(SCRATCH.format(run_root=tmp_path / "runs", corpus=tmp_path / "x.jsonl"))
    hashes = []
    for extra in ([], ["data.engine=datatrove", "data.datatrove.executor=slurm", "data.datatrove.tasks=40",
                       "data.datatrove.partition=small"]):
        loaded = load_recipe(recipe, extra)
        hashes.append({stage.name: recipe_hash(loaded, stage) for stage in stage_table(loaded.recipe)})
    assert hashes[0] == hashes[1]


def test_missing_datatrove_is_one_line_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_datatrove(name: str, *args: object, **kwargs: object) -> object:
        if name == "datatrove" or name.startswith("datatrove."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_datatrove)
    with pytest.raises(LangadaptError, match=r"pip install 'langadapt\[prep\]'"):
        datatrove_pieces.require_datatrove()


@pytest.mark.usefixtures("slurm")
def test_slurm_cleaning_array_then_merge_job_writes_the_local_run(tmp_path: Path) -> None:
    """submit_preparation on the real single-node Slurm: a cleaning array of 3 tasks, then the job
    that merges (afterok); its data folder and fingerprint are a local run's, and its id is the last job's."""
    import subprocess
    import time

    from tests.helpers.cli import run_cli

    src = tmp_path / "src"
    src.mkdir()
    for f in range(4):  # four files: four pieces (a subprocess would not see a patched PIECE_BYTES)
        _jsonl(src / f"nb-{f}.jsonl", [{"text": t} for t in _texts(120, f) + _texts(10, 0)])
    recipes = {}
    for name, root in (("slurm", tmp_path / "slurm-runs"), ("local", tmp_path / "local-runs")):
        recipes[name] = tmp_path / f"{name}.yaml"
        recipes[name].write_text(SCRATCH.format(run_root=root, corpus=src / "nb-*.jsonl"))
    from langadapt.cli.datatrove_slurm import submit_preparation

    job = submit_preparation(recipes["slurm"], ["data.datatrove.tasks=3", "data.datatrove.finish_cpus=1",
                                                "data.datatrove.time=10:00"], until="data")
    deadline = time.monotonic() + 300
    while subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True, check=False).stdout.strip():
        assert time.monotonic() < deadline, f"preparation job {job} still queued or running after 300 s"
        time.sleep(2)
    state = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True, check=False).stdout
    assert "JobState=COMPLETED" in state, state
    assert run_cli("run", str(recipes["local"]), "--until", "data").returncode == 0
    slurm_data, local_data = tmp_path / "slurm-runs" / "dt" / "data", tmp_path / "local-runs" / "dt" / "data"
    for name in ("stats.json", "train/nb.jsonl.gz", "valid/nb.jsonl.gz"):
        assert (slurm_data / name).read_bytes() == (local_data / name).read_bytes(), name
    manifests = [json.loads((d / "manifest.json").read_text()) for d in (slurm_data, local_data)]
    assert manifests[0]["fingerprint"] == manifests[1]["fingerprint"]
    assert manifests[0]["summary"]["run"]["tasks"] == 3 and (slurm_data / "COMPLETE").is_file()
    # every cleaning task ran in the array: the merge job found nothing left to clean
    logs = next((tmp_path / "slurm-runs" / "dt" / datatrove_pieces.WORK_FOLDER).glob("*/logs/clean-3"))
    assert sorted(p.name for p in (logs / "completions").iterdir()) == ["00000", "00001", "00002"]
    assert (logs / "launch_script.slurm").is_file()


SCRATCH = """\
name: dt
run_root: {run_root}
init: scratch
base_model:
  architecture: {{model_type: llama, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1,
                 num_attention_heads: 2, num_key_value_heads: 1}}
data:
  force_epochs: true
  sources:
    - {{name: nb, path: {corpus}, lang: nb}}
tokenizer: {{kind: byte_bpe, vocab_size: 300}}
"""
