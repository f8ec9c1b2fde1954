"""Preparation job, then training job, on a real single-node Slurm (issue 37 item 5).

The scripts `langadapt launch` writes, submitted by the submit.sh it writes: the preparation job
runs the real data, tokenizer and embeddings stages of a tiny recipe on 2 cores; the training
job's steps are a stand-in (training a model does not fit this test's minute) that records when
it started and what the preparation left. Setup and skips as in test_train_launch_slurm.py,
whose `slurm` fixture this module uses.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.job_env import inherited_env

from langadapt.recipe.cluster import PreparationConfig
from langadapt.runtime.launch import write_launch
from tests.runtime.test_train_launch_slurm import CPU_NODE, _job_state, _wait, slurm  # noqa: F401 (fixture)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("slurm")]
DONE = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}

RECIPE = """\
name: prep
run_root: {root}/runs
init: scratch
base_model:
  architecture: {{model_type: llama, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1,
                 num_attention_heads: 2, num_key_value_heads: 2, max_position_embeddings: 128}}
data:
  sources:
    - {{name: nb, path: {source}, lang: nb}}
tokenizer:
  vocab_size: 300
"""

# The one command of both jobs (`command=`, as the other Slurm tests substitute theirs): the
# preparation's `--until embeddings` runs the real pipeline; the training job's steps record
# their start and the run's state instead of training.
TASK = """\
import json, os, sys, time
from pathlib import Path

out, args = Path(os.environ["LAUNCH_TEST_OUT"]), sys.argv[1:]
if args[1:3] == ["--until", "embeddings"]:
    start = time.time()
    if os.environ.get("LAUNCH_TEST_FAIL_PREP"):
        rc = 3
    else:
        from langadapt.cli import main
        rc = main(["run", *args])
    (out / "prepare.json").write_text(json.dumps({"start": start, "end": time.time(), "rc": rc,
                                                  "cpus": os.environ.get("SLURM_CPUS_PER_TASK")}))
    sys.exit(rc)
from langadapt.data.shards import read_shards
from langadapt.recipe import load_recipe
from langadapt.run.completion import is_complete
from langadapt.run.layout import RunLayout

layout = RunLayout(load_recipe(args[0]).recipe.run_dir)
step = f"train-{os.environ['SLURM_PROCID']}" if "--until" in args else "evaluate"
(out / f"{step}.json").write_text(json.dumps({
    "start": time.time(),
    "complete": [s for s in ("data", "tokenizer", "embeddings") if is_complete(layout.stage_dir(s))],
    "shards": {name: shard.num_tokens for name, shard in read_shards(layout.tokenizer.tokens).items()},
}))
"""


def _launch(tmp_path: Path, shared_dir: Path) -> tuple[Path, dict[Path, str]]:
    recipe = tmp_path / "prep.yaml"
    recipe.write_text(RECIPE.format(root=tmp_path, source=shared_dir / "corpora" / "nb.debian-handbook.train.jsonl.gz"))
    (tmp_path / "task.py").write_text(TASK)
    (tmp_path / "out").mkdir()
    files = write_launch(recipe, tmp_path / "job.sbatch", preset=CPU_NODE, partition="debug", workdir=tmp_path,
                         time="5", signal_seconds=60, job_name="prep-test",
                         command=f"{sys.executable} {tmp_path / 'task.py'}",
                         preparation=PreparationConfig(partition="debug", cpus=2, time="5"))
    return recipe, files


def _submit(files: dict[Path, str], **env: str) -> tuple[str, str]:
    """Run the launch's submit.sh (what a user runs); the two job ids it printed."""
    clean = inherited_env()
    submit = list(files)[-1]  # submission order: submit.sh last
    done = subprocess.run(["bash", str(submit)], capture_output=True, text=True, check=False, timeout=60,
                          env={**clean, **env})
    assert done.returncode == 0, done.stderr
    prepare = re.search(r"preparation: job (\d+)", done.stdout)
    train = re.search(r"training: job (\d+)", done.stdout)
    assert prepare and train, done.stdout
    return prepare.group(1), train.group(1)


def _logs(tmp_path: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()}" for p in sorted((tmp_path / "logs").glob("*.out")))


def test_training_starts_only_after_preparation_succeeded(tmp_path: Path, shared_dir: Path) -> None:
    recipe, files = _launch(tmp_path, shared_dir)
    out = tmp_path / "out"
    prepare, train = _submit(files, LAUNCH_TEST_OUT=str(out))
    # Both jobs fit on the node at once (2 cores + 2 tasks of 1 of its 4): only the dependency keeps
    # the training job waiting while the preparation runs.
    # (The real stages take tens of seconds: the preparation is seen running.)
    _wait(prepare, {"RUNNING"}, timeout=60)
    waiting = _job_state(train)
    assert (waiting["JobState"], waiting["Reason"]) == ("PENDING", "Dependency"), waiting
    assert waiting["Dependency"].startswith(f"afterok:{prepare}"), waiting
    prep_state = _wait(prepare, DONE, timeout=240)
    train_state = _wait(train, DONE, timeout=120)
    assert (prep_state["JobState"], train_state["JobState"]) == ("COMPLETED", "COMPLETED"), _logs(tmp_path)
    assert train_state["StartTime"] >= prep_state["EndTime"]  # Slurm's own clock (ISO, to the second)

    prep = json.loads((out / "prepare.json").read_text())
    print(f"preparation job: {prep['end'] - prep['start']:.1f} s of real stages; training began "
          f"{min(json.loads(p.read_text())['start'] for p in out.glob('train-*.json')) - prep['end']:.1f} s after it ended")
    assert prep["rc"] == 0 and prep["cpus"] == "2"  # the job's cores, which num_workers=None uses
    ranks = [json.loads((out / f"train-{r}.json").read_text()) for r in (0, 1)]
    evaluate = json.loads((out / "evaluate.json").read_text())
    for record in ranks:  # each srun rank of the training job found the prepared run
        assert record["start"] > prep["end"]
        assert record["complete"] == ["data", "tokenizer", "embeddings"]
        assert set(record["shards"]) == {"nb"} and record["shards"]["nb"] > 10_000
    assert evaluate["start"] >= max(r["start"] for r in ranks)
    # The same shards a local run writes: the preparation job is `langadapt run`, nothing else.
    from langadapt.cli import main

    local = tmp_path / "local.yaml"
    local.write_text(recipe.read_text().replace(f"{tmp_path}/runs", f"{tmp_path}/local_runs"))
    assert main(["run", str(local), "--until", "tokenizer"]) == 0
    job_tokens = tmp_path / "runs" / "prep" / "tokenizer" / "tokens"
    local_tokens = tmp_path / "local_runs" / "prep" / "tokenizer" / "tokens"
    names = sorted(str(p.relative_to(job_tokens)) for p in job_tokens.rglob("*") if p.is_file())
    assert names and names == sorted(str(p.relative_to(local_tokens)) for p in local_tokens.rglob("*") if p.is_file())
    assert all((job_tokens / n).read_bytes() == (local_tokens / n).read_bytes() for n in names)


def test_a_failed_preparation_cancels_training(tmp_path: Path, shared_dir: Path) -> None:
    _, files = _launch(tmp_path, shared_dir)
    out = tmp_path / "out"
    prepare, train = _submit(files, LAUNCH_TEST_OUT=str(out), LAUNCH_TEST_FAIL_PREP="1")
    assert _wait(prepare, DONE, timeout=120)["JobState"] == "FAILED"
    state = _wait(train, DONE, timeout=60)  # --kill-on-invalid-dep: not left pending forever
    assert (state["JobState"], state["Reason"]) == ("CANCELLED", "DependencyNeverSatisfied"), state
    assert json.loads((out / "prepare.json").read_text())["rc"] == 3
    assert not list(out.glob("train-*.json")) and not (out / "evaluate.json").exists()


def test_datatrove_preparation_then_training(tmp_path: Path, shared_dir: Path) -> None:
    """`data.engine: datatrove` on Slurm: submit.sh submits datatrove's cleaning array (3 tasks) and
    its merge job (merge, tokenizer, embeddings: the real stages), then the training stand-in with
    afterok on the merge job's id, which starts only once that job ended and finds the shards."""
    pytest.importorskip("datatrove")
    import gzip

    from langadapt.recipe import load_recipe
    from langadapt.runtime.launch import datatrove_on_slurm

    src = tmp_path / "src"
    src.mkdir()
    with gzip.open(shared_dir / "corpora" / "nb.debian-handbook.train.jsonl.gz", "rt") as corpus:
        lines = corpus.read().splitlines(True)
    for f in range(3):  # three files: three pieces, three cleaning tasks
        (src / f"nb-{f}.jsonl").write_text("".join(lines[f::3]))
    recipe = tmp_path / "dt.yaml"
    recipe.write_text(RECIPE.format(root=tmp_path, source=src / "nb-*.jsonl").replace(
        "data:\n", "data:\n  engine: datatrove\n  datatrove: {executor: slurm, tasks: 3, finish_cpus: 2, "
                   "mem_per_cpu_gb: 1, time: '10:00'}\n"))
    (tmp_path / "task.py").write_text(TASK)
    out = tmp_path / "out"
    out.mkdir()
    files = write_launch(recipe, tmp_path / "job.sbatch", preset=CPU_NODE, partition="debug", workdir=tmp_path,
                         time="5", signal_seconds=60, job_name="dt-test",
                         command=f"{sys.executable} {tmp_path / 'task.py'}",
                         preparation=PreparationConfig(partition="debug"),
                         datatrove=datatrove_on_slurm(load_recipe(recipe).recipe.data))
    assert [p.name for p in files] == ["job.sbatch", "job.submit.sh"]
    prepare, train = _submit(files, LAUNCH_TEST_OUT=str(out), LANGADAPT_PYTHON=sys.executable)
    waiting = _job_state(train)
    assert waiting["Dependency"].startswith(f"afterok:{prepare}"), waiting
    prep_state = _wait(prepare, DONE, timeout=300)
    train_state = _wait(train, DONE, timeout=120)
    work = next((tmp_path / "runs" / "prep" / ".data.datatrove").glob("*"))
    finish_logs = "\n".join(p.read_text() for p in (work / "logs").rglob("slurm_logs/*.out"))
    assert (prep_state["JobState"], train_state["JobState"]) == ("COMPLETED", "COMPLETED"), \
        _logs(tmp_path) + finish_logs
    assert prep_state["JobName"] == "dt-test-prepare"
    assert train_state["StartTime"] >= prep_state["EndTime"]  # Slurm's clock: training after the merge job
    clean = sorted(p.name for p in (work / "logs" / "clean-3" / "completions").iterdir())
    assert clean == ["00000", "00001", "00002"]  # every cleaning task ran in the array, not in the merge job
    ranks = [json.loads((out / f"train-{r}.json").read_text()) for r in (0, 1)]
    for record in ranks:  # each srun rank of the training job found the prepared run
        assert record["complete"] == ["data", "tokenizer", "embeddings"]
        assert set(record["shards"]) == {"nb"} and record["shards"]["nb"] > 10_000
    manifest = json.loads((tmp_path / "runs" / "prep" / "data" / "manifest.json").read_text())
    assert manifest["summary"]["run"]["engine"] == "datatrove" and manifest["summary"]["run"]["tasks"] == 3
