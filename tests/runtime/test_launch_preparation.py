"""Two jobs per launch: preparation on a CPU node, training on the GPUs after it (issue 37 item 5).

Rendering: the preparation script's directives and command, the training script without the
data..embeddings step, submit.sh's dependency run against a stand-in `sbatch`, the CLI's dry run.
The same scripts run on a real Slurm in test_launch_preparation_slurm.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from langadapt.errors import LangadaptError
from langadapt.recipe import Recipe
from langadapt.recipe.cluster import PreparationConfig
from langadapt.runtime.launch import (
    preparation_command,
    render_launch,
    render_preparation_sbatch,
    write_launch,
)
from langadapt.runtime.presets import ClusterPreset
from langadapt.runtime.sbatch import build_config
from langadapt.runtime.signals import REQUEUE_EXIT_CODE

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def recipe(tmp_path: Path) -> Path:
    path = tmp_path / "nb.yaml"
    path.write_text("name: demo\n")
    return path


def _options(text: str) -> dict[str, str]:
    return dict(line.removeprefix("#SBATCH --").partition("=")[::2]
                for line in text.splitlines() if line.startswith("#SBATCH --"))


def _bash_n(text: str, tmp_path: Path) -> None:
    script = tmp_path / "check.sh"
    script.write_text(text)
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_lumi_launch_is_a_cpu_job_then_a_gpu_job(recipe: Path, tmp_path: Path) -> None:
    files = write_launch(recipe, tmp_path / "job.sbatch", preset="lumi-g", nodes=8, account="project_465000001",
                         workdir=tmp_path, run_args=["--set", "stage2.steps=10"])
    prepare, train, submit = files
    assert (prepare.name, train.name, submit.name) == ("job.prepare.sbatch", "job.sbatch", "job.submit.sh")
    assert all(path.read_text() == text and os.access(path, os.X_OK) for path, text in files.items())
    prep, gpu = _options(files[prepare]), _options(files[train])
    # A whole LUMI-C node: every core for the data stage's workers, all its memory, no GPU.
    assert prep == {"job-name": "nb-prepare", "account": "project_465000001", "partition": "standard",
                    "nodes": "1", "ntasks": "1", "cpus-per-task": "128", "mem": "0", "time": "2-00:00:00",
                    "chdir": str(tmp_path), "output": "logs/%x-%j.out"}
    assert (gpu["partition"], gpu["nodes"], gpu["gpus-per-node"]) == ("standard-g", "8", "8")
    assert gpu["signal"] == "B:USR1@600" and "requeue" in gpu  # the GPU job's requeue is as it was
    # The preparation runs data..embeddings once; the GPU job no longer does.
    assert files[prepare].count("--until embeddings") == 1 and "srun" not in files[prepare]
    assert f"langadapt run {recipe} --until embeddings --set stage2.steps=10" in files[prepare]
    assert "--until embeddings" not in files[train] and "data..embeddings" not in files[train]
    assert f"langadapt run {recipe} --until stage2 --set stage2.steps=10" in files[train]
    assert "nb-prepare succeeded" in files[train]  # the header says what it waits for
    # The collectives' variables stay in the GPU job; the container and the Hub cache go to both.
    assert "NCCL_SOCKET_IFNAME" not in files[prepare] and "MIOPEN" not in files[prepare]
    assert "export SINGULARITY_BIND=" in files[prepare] and "export HF_HOME=" in files[prepare]
    assert 'export OMP_NUM_THREADS="${SLURM_CPUS_PER_TASK}"' in files[prepare]
    assert 'export OMP_NUM_THREADS="7"' in files[train]
    for text in files.values():
        _bash_n(text, tmp_path)


def test_the_recipes_preparation_settings_reach_the_script(recipe: Path, tmp_path: Path) -> None:
    prep = PreparationConfig(partition="small", account="cpu_acct", cpus=32, mem="200G", time="12:00:00")
    files = render_launch(recipe, build_config(preset="nvidia-4", account="gpu_acct", partition="gpu_h100",
                                               extra_sbatch=["--qos=high"], preparation=prep, workdir=tmp_path),
                          tmp_path / "t.sbatch")
    text = files[tmp_path / "t.prepare.sbatch"]
    opts = _options(text)
    assert (opts["partition"], opts["account"], opts["cpus-per-task"], opts["mem"], opts["time"]) == \
        ("small", "cpu_acct", "32", "200G", "12:00:00")
    assert "qos" not in opts and "gpus-per-node" not in opts and "TORCH_NCCL" not in text
    # A preset without a known CPU partition leaves it to the site's default, never the GPU one.
    bare = render_preparation_sbatch(recipe, build_config(preset="nvidia-4", partition="gpu_h100",
                                                          preparation=PreparationConfig()))
    assert "partition" not in _options(bare) and "account" not in _options(bare)


def test_without_prepare_there_is_one_script(recipe: Path, tmp_path: Path) -> None:
    files = render_launch(recipe, build_config(preset="nvidia-8", prepare=False, preparation=PreparationConfig()),
                          tmp_path / "only.sbatch")
    assert list(files) == [tmp_path / "only.sbatch"]
    with pytest.raises(LangadaptError, match="no preparation job configured"):
        render_preparation_sbatch(recipe, build_config())


def test_preparation_command_is_the_one_seam(recipe: Path) -> None:
    config = build_config(command="python -m x run", run_args=["--set", "a=b c"], preparation=PreparationConfig())
    line = f"$RUN_PREFIX python -m x run {recipe} --until embeddings --set 'a=b c'"
    assert preparation_command(recipe, config) == [line]
    assert preparation_command(recipe, config)[0] in render_preparation_sbatch(recipe, config)


FAKE_SBATCH = """#!/bin/bash
# Stand-in sbatch: record the arguments, answer as --parsable does (id;cluster).
echo "$*" >> "$FAKE_LOG"
n=$(wc -l < "$FAKE_LOG")
echo "$((4000 + n));testcluster"
"""


def test_submit_makes_training_depend_on_preparation(recipe: Path, tmp_path: Path) -> None:
    files = write_launch(recipe, tmp_path / "out" / "j.sbatch", preset="nvidia-4", workdir=tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(FAKE_SBATCH)
    (bin_dir / "sbatch").chmod(0o755)
    log = tmp_path / "sbatch.log"
    submit = list(files)[2]
    done = subprocess.run(["bash", str(submit)], capture_output=True, text=True, check=False, cwd=tmp_path,
                          env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_LOG": str(log)})
    assert done.returncode == 0, done.stderr
    assert log.read_text().splitlines() == [
        "--parsable j.prepare.sbatch",
        "--parsable --dependency=afterok:4001 --kill-on-invalid-dep=yes j.sbatch",
    ]
    assert "preparation: job 4001" in done.stdout and "training: job 4002, after job 4001" in done.stdout


def test_a_failed_submission_stops_before_the_training_job(recipe: Path, tmp_path: Path) -> None:
    files = write_launch(recipe, tmp_path / "j.sbatch", preset="nvidia-4", workdir=tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text('#!/bin/bash\necho "$*" >> "$FAKE_LOG"; echo "invalid partition" >&2; exit 1\n')
    (bin_dir / "sbatch").chmod(0o755)
    log = tmp_path / "sbatch.log"
    done = subprocess.run(["bash", str(list(files)[2])], capture_output=True, text=True, check=False,
                          env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_LOG": str(log)})
    assert done.returncode != 0 and log.read_text().splitlines() == ["--parsable j.prepare.sbatch"]


def _steps_run(tmp_path: Path, recipe: Path, fail: str = "x") -> tuple[int, list, list[str]]:
    """Run the training script of a launch with stand-ins for srun and scontrol; the steps it ran."""
    task = tmp_path / "record.py"
    task.write_text("import json, os, sys\n"
                    "open(os.environ['FAKE_LOG'] + '.steps', 'a').write(json.dumps([os.environ.get('IN_SRUN', ''), "
                    "sys.argv[1:]]) + '\\n')\n"
                    "sys.exit(int(os.environ.get('FAIL_FLAGS', 'x') in ' '.join(sys.argv)) * int(os.environ['RC']))\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "srun").write_text("#!/bin/bash\nwhile [[ \"$1\" == --* ]]; do shift; done\nIN_SRUN=1 exec \"$@\"\n")
    (bin_dir / "scontrol").write_text('#!/bin/bash\n[ "$1" = requeue ] && echo "$2" >> "$FAKE_LOG.requeued"\n'
                                      "echo node001\n")
    for name in ("srun", "scontrol"):
        (bin_dir / name).chmod(0o755)
    files = write_launch(recipe, tmp_path / "j.sbatch", preset=ClusterPreset(name="cpu", tasks_per_node=2),
                         workdir=tmp_path, command=f"{sys.executable} {task}")
    log = tmp_path / "fake"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_LOG": str(log), "SLURM_JOB_ID": "7",
           "FAIL_FLAGS": fail, "RC": str(REQUEUE_EXIT_CODE)}
    done = subprocess.run(["bash", str(tmp_path / "j.sbatch")], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    steps = [json.loads(line) for line in (tmp_path / "fake.steps").read_text().splitlines()]
    requeued = (tmp_path / "fake.requeued").read_text().split() if (tmp_path / "fake.requeued").exists() else []
    assert list(files)[1] == tmp_path / "j.sbatch"
    return done.returncode, steps, requeued


def test_training_job_runs_training_then_evaluate_export(recipe: Path, tmp_path: Path) -> None:
    rc, steps, requeued = _steps_run(tmp_path, recipe)
    r = str(recipe)
    assert (rc, requeued) == (0, [])
    assert steps == [["1", [r, "--until", "stage2"]], ["", [r]]]  # srun'd training, then evaluate/export here


def test_training_job_still_requeues(recipe: Path, tmp_path: Path) -> None:
    rc, steps, requeued = _steps_run(tmp_path, recipe, fail="--until stage2")  # training exits 75
    assert (rc, requeued) == (0, ["7"]) and len(steps) == 1  # requeued, evaluate/export not run


def test_cli_dry_run_prints_both_scripts_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from langadapt.cli import main

    monkeypatch.chdir(tmp_path)
    recipe = REPO / "recipes" / "norwegian_warm.yaml"
    assert main(["launch", str(recipe), "--slurm", "--dry-run", "--account", "p1",
                 "--set", "cluster.preparation.cpus=64", "--set", "cluster.preparation.time='6:00:00'"]) == 0
    out = capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []  # not even logs/
    names = [f"norwegian_warm.lumi-g.{part}" for part in ("prepare.sbatch", "sbatch", "submit.sh")]
    assert [line.split("/")[-1] for line in out.splitlines() if line.startswith("# ==> ")] == \
        [f"{name} <==" for name in names]
    assert "#SBATCH --cpus-per-task=64" in out and "#SBATCH --time=6:00:00" in out
    assert "#SBATCH --nodes=8" in out and "#SBATCH --gpus-per-node=8" in out
    assert '--dependency="afterok:$prepare" --kill-on-invalid-dep=yes norwegian_warm.lumi-g.sbatch' in out
    assert "would write" in out and "training waits for the preparation" in out


def test_cli_writes_three_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    from langadapt.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["launch", str(REPO / "recipes" / "norwegian_warm.yaml"), "--slurm", "--out", "x/run.sbatch"]) == 0
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == ["run.prepare.sbatch", "run.sbatch", "run.submit.sh"]
    assert "bash " + str(Path("x/run.submit.sh")) in capsys.readouterr().out
    assert main(["launch", str(REPO / "recipes" / "norwegian_warm.yaml"), "--slurm", "--sweep", "nodes=1",
                 "--dry-run"]) == 2  # one line, not a traceback


@pytest.mark.parametrize("value, needle", [
    ("6:00:00", "is a number (YAML reads an unquoted 6:00:00 as 21600): quote the time"),
    ("soon", "'soon' is not a Slurm time"),
])
def test_bad_preparation_time_is_one_line(value: str, needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    from langadapt.cli import main

    assert main(["launch", str(REPO / "recipes" / "norwegian_warm.yaml"), "--slurm", "--dry-run",
                 "--set", f"cluster.preparation.time={value}"]) == 2
    err = capsys.readouterr().err
    assert "cluster.preparation.time" in err and needle in err and err.count("\n") == 1


# --- Preparation on datatrove over Slurm: submit.sh takes the id datatrove's submission prints ---

DATATROVE_RECIPE = """\
name: dtl
run_root: {root}/runs
init: scratch
base_model:
  architecture: {{model_type: llama, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1,
                 num_attention_heads: 2, num_key_value_heads: 2}}
data:
  engine: datatrove
  datatrove: {{executor: slurm, tasks: 2, finish_cpus: 2{extra}}}
  sources:
    - {{name: nb, path: {root}/src/nb-*.jsonl, lang: nb}}
tokenizer: {{vocab_size: 300}}
"""

# Answers as sbatch does: `id;cluster` with --parsable (submit.sh), else "Submitted batch job id"
# (datatrove's executor); records each submission's options and the #SBATCH lines of its script.
DATATROVE_SBATCH = """#!/bin/bash
n=$(( $(cat "$FAKE_LOG" 2>/dev/null | wc -l) + 1 ))
id=$((4000 + n))
script="${@: -1}"
directives=$(sed -n 's/^#SBATCH --//p' "$script" | grep -E '^(job-name|partition|account|kill-on-invalid-dep|array)' \
             | sort | tr '\\n' ' ')
echo "$id | $* | $directives" >> "$FAKE_LOG"
if [ -n "$FAKE_SBATCH_FAIL" ]; then echo "sbatch: error: invalid partition specified" >&2; exit 1; fi
case " $* " in *" --parsable "*) echo "$id;testcluster";; *) echo "Submitted batch job $id";; esac
"""


def _datatrove_recipe(tmp_path: Path, extra: str = "") -> Path:
    pytest.importorskip("datatrove")
    (tmp_path / "src").mkdir(exist_ok=True)
    for f in range(2):  # two files: two pieces, two cleaning tasks
        rows = [{"text": f"Dokument {f}-{i}: norsk tekst om fjell, fjord og {i * 7 + f} ord."} for i in range(30)]
        (tmp_path / "src" / f"nb-{f}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    recipe = tmp_path / "dtl.yaml"
    recipe.write_text(DATATROVE_RECIPE.format(root=tmp_path, extra=extra))
    return recipe


def _run_submit(submit: Path, tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "sbatch").write_text(DATATROVE_SBATCH)
    (bin_dir / "sbatch").chmod(0o755)
    log = tmp_path / "sbatch.log"
    done = subprocess.run(["bash", str(submit)], capture_output=True, text=True, check=False, timeout=120,
                          env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_LOG": str(log),
                               "LANGADAPT_PYTHON": sys.executable, **env})
    calls = [[part.strip() for part in line.split("|")] for line in log.read_text().splitlines()] if log.exists() else []
    return done, calls


def test_datatrove_preparation_id_is_what_training_waits_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from langadapt.cli import main

    recipe = _datatrove_recipe(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["launch", str(recipe), "--slurm", "--account", "p1", "--out", "jobs/x.sbatch", "--job-name", "x"]) == 0
    assert "datatrove over Slurm: 2 cleaning task(s)" in capsys.readouterr().out
    # datatrove submits the preparation's jobs itself: no prepare.sbatch beside the training job.
    assert sorted(p.name for p in (work / "jobs").iterdir()) == ["x.sbatch", "x.submit.sh"]
    submit_text = (work / "jobs" / "x.submit.sh").read_text()
    assert f"cd {work} && " in submit_text  # the training job's --chdir: a relative run_root is one folder
    assert "-m langadapt.cli launch" in submit_text and "--submit-preparation" in submit_text
    assert "sbatch --parsable x.prepare" not in submit_text
    done, calls = _run_submit(work / "jobs" / "x.submit.sh", tmp_path)
    assert done.returncode == 0, done.stderr
    ids: dict[str, str] = {}  # the first job of each name (datatrove adds a stats job of the same name after each)
    for job, _, directives in calls:
        ids.setdefault(directives.split("job-name=")[1].split()[0], job)
    # The cleaning array, then (afterok on it) the job that merges and runs tokenizer and embeddings,
    # named after the launch; the preset's CPU partition and --account, as cluster.preparation.
    assert {"x-clean", "x-prepare"} <= set(ids), calls
    clean, prepare = (next(c for c in calls if c[0] == ids[name]) for name in ("x-clean", "x-prepare"))
    assert "array=0-1 " in clean[2] and f"--dependency=afterok:{ids['x-clean']}" in prepare[1]
    for call in (clean, prepare):
        assert all(d in call[2] for d in ("partition=standard", "account=p1", "kill-on-invalid-dep=yes")), call
    # The training job waits for the id the datatrove submission printed: the last job's.
    assert calls[-1][1] == f"--parsable --dependency=afterok:{ids['x-prepare']} --kill-on-invalid-dep=yes x.sbatch"
    assert f"preparation: job {ids['x-prepare']} (datatrove" in done.stdout
    assert f"training: job {calls[-1][0]}, after job {ids['x-prepare']}" in done.stdout
    assert "Launching Slurm job" in done.stderr  # datatrove's log, on stderr: stdout was the id alone
    train = (work / "jobs" / "x.sbatch").read_text()
    assert "--until embeddings" not in train and "x-prepare (datatrove" in train


def test_a_submit_sh_written_before_the_move_still_submits_the_preparation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An earlier launch's submit.sh runs `-m langadapt.data.datatrove_engine submit RECIPE ...`; the
    module forwards it to `langadapt launch RECIPE --slurm --submit-preparation`: the same two jobs."""
    from langadapt.cli import main

    recipe = _datatrove_recipe(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["launch", str(recipe), "--slurm", "--account", "p1", "--out", "jobs/x.sbatch", "--job-name", "x"]) == 0
    submit = work / "jobs" / "x.submit.sh"
    text = submit.read_text()
    earlier = text.replace("-m langadapt.cli launch", "-m langadapt.data.datatrove_engine submit").replace(
        " --slurm --submit-preparation", "")
    assert "datatrove_engine submit" in earlier and "--submit-preparation" not in earlier
    submit.write_text(earlier)
    done, calls = _run_submit(submit, tmp_path)
    assert done.returncode == 0, done.stderr
    ids: dict[str, str] = {}
    for job, _, directives in calls:
        ids.setdefault(directives.split("job-name=")[1].split()[0], job)
    assert {"x-clean", "x-prepare"} <= set(ids), calls
    assert calls[-1][1] == f"--parsable --dependency=afterok:{ids['x-prepare']} --kill-on-invalid-dep=yes x.sbatch"


def test_datatrove_submission_that_fails_submits_no_training(tmp_path: Path) -> None:
    recipe = _datatrove_recipe(tmp_path)
    files = write_launch(recipe, tmp_path / "j.sbatch", preset="nvidia-4", workdir=tmp_path,
                         preparation=PreparationConfig(), datatrove=_load(recipe).data.datatrove)
    assert [p.name for p in files] == ["j.sbatch", "j.submit.sh"]
    done, calls = _run_submit(tmp_path / "j.submit.sh", tmp_path, FAKE_SBATCH_FAIL="1")
    assert done.returncode != 0 and len(calls) == 1 and "--parsable" not in calls[0][1]  # no training job
    assert "langadapt: error:" in done.stderr and "Traceback" not in done.stderr


def _load(recipe: Path, *overrides: str) -> Recipe:
    from langadapt.recipe import load_recipe

    return load_recipe(recipe, list(overrides)).recipe


@pytest.mark.parametrize("extra, sets, key", [
    (", partition: small", ["cluster.preparation.partition=standard"], "data.datatrove.partition"),
    (", sbatch_args: {account: a}", ["cluster.preparation.account=b"], "data.datatrove.sbatch_args.account"),
])
def test_partition_and_account_have_one_source(tmp_path: Path, extra: str, sets: list[str], key: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from langadapt.cli import main

    recipe = _datatrove_recipe(tmp_path, extra)
    assert main(["launch", str(recipe), "--slurm", "--dry-run", *(p for s in sets for p in ("--set", s))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{key}: " in err and "differs from cluster.preparation." in err, err
    # The same value twice is one value; datatrove's spelling alone is read (cluster.preparation unset).
    assert main(["launch", str(recipe), "--slurm", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "cluster.preparation.partition" not in out if "partition" in extra else \
        "cluster.preparation.partition=\"standard\"" in out
    # write_launch from Python: the same check, one line.
    with pytest.raises(LangadaptError, match="differs from cluster.preparation"):
        render_launch(recipe, build_config(preparation=PreparationConfig(partition="standard", account="b"),
                                           datatrove=_load(recipe).data.datatrove), tmp_path / "p.sbatch")


def test_datatrove_on_this_node_keeps_the_preparation_job(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from langadapt.cli import main

    recipe = _datatrove_recipe(tmp_path)
    assert main(["launch", str(recipe), "--slurm", "--dry-run", "--set", "data.datatrove.executor=local"]) == 0
    out = capsys.readouterr().out
    assert "dtl.lumi-g.prepare.sbatch <==" in out and "--submit-preparation" not in out
