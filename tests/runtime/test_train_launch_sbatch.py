"""Generated sbatch scripts: syntax, content per preset, and the requeue logic run for real.

The behaviour tests execute the script with bash, with stand-ins for `srun` (runs the task in
place, forwarding signals as srun does) and `scontrol` (answers `show hostnames`, records
`requeue`), so the trap/wait/requeue logic is exercised without a Slurm installation. The same
scripts run on a real Slurm in test_train_launch_slurm.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from langadapt.errors import LangadaptError
from langadapt.recipe.cluster import ClusterConfig, PreparationConfig, slurm_time_seconds
from langadapt.runtime.launch import launch_from_options
from langadapt.runtime.launch_options import LaunchOptions
from langadapt.runtime.presets import PRESETS, ClusterPreset
from langadapt.runtime.sbatch import write_sbatch
from langadapt.runtime.signals import REQUEUE_EXIT_CODE


@pytest.fixture
def recipe(tmp_path: Path) -> Path:
    path = tmp_path / "norwegian_warm.yaml"
    path.write_text("name: demo\n")
    return path


def _bash_n(script: Path) -> None:
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def _sbatch_options(text: str) -> dict[str, str]:
    return dict(
        line.removeprefix("#SBATCH --").partition("=")[::2]
        for line in text.splitlines()
        if line.startswith("#SBATCH --")
    )


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_is_valid_bash(preset: str, recipe: Path, tmp_path: Path) -> None:
    script = write_sbatch(recipe, preset, nodes=2, out_path=tmp_path / f"{preset}.sbatch", workdir=tmp_path)
    _bash_n(script)
    text = script.read_text()
    opts = _sbatch_options(text)
    gpus = PRESETS[preset].gpus_per_node
    assert opts["nodes"] == "2" and opts["gpus-per-node"] == opts["ntasks-per-node"] == str(gpus)
    assert opts["signal"] == "B:USR1@600" and "requeue" in opts and opts["open-mode"] == "append"
    assert opts["chdir"] == str(tmp_path) and (tmp_path / "logs").is_dir()
    assert f"langadapt run {recipe}" in text  # one srun task per GPU runs the same command
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1' in text
    assert f'"$STATUS" -eq {REQUEUE_EXIT_CODE}' in text and 'scontrol requeue "$SLURM_JOB_ID"' in text
    assert "torchrun" not in text  # srun starts the ranks; DistInfo reads SLURM_* itself


def test_lumi_preset_content(recipe: Path, tmp_path: Path) -> None:
    text = write_sbatch(recipe, "lumi-g", nodes=4, account="project_465000001", time="2-00:00:00",
                        out_path=tmp_path / "lumi.sbatch").read_text()
    opts = _sbatch_options(text)
    assert opts["partition"] == "standard-g" and opts["account"] == "project_465000001"
    assert opts["cpus-per-task"] == "7" and opts["mem"] == "480G"
    assert 'export NCCL_SOCKET_IFNAME="hsn0,hsn1,hsn2,hsn3"' in text
    assert "export MIOPEN_USER_DB_PATH=" in text and "export NCCL_NET_GDR_LEVEL" in text
    srun = next(line for line in text.splitlines() if "srun --kill-on-bad-exit" in line)
    masks = srun.split("--cpu-bind=mask_cpu:")[1].split()[0].split(",")
    # 8 masks, one CCD each (7 cores, first core of the CCD left to the system), all disjoint.
    bits = [int(m, 16) for m in masks]
    assert len(bits) == 8 and all(b.bit_count() == 7 for b in bits)
    assert sum(bits) == int.from_bytes(bytes([0xFE] * 8), "big")
    assert ">>> EDIT" in text and "LANGADAPT_SIF=/appl/local/containers/sif-images/" in text  # marked placeholder
    # the container from an env var (none: langadapt on PATH), Lustre bound into it, HF cache off home
    assert 'RUN_PREFIX="${RUN_PREFIX:-${LANGADAPT_SIF:+singularity exec $LANGADAPT_SIF}}"' in text
    assert "export SINGULARITY_BIND=" in text and 'export HF_HOME="${HF_HOME:-/scratch/' in text


@pytest.mark.parametrize("gpus", [4, 8])
def test_nvidia_presets(gpus: int, recipe: Path, tmp_path: Path) -> None:
    text = write_sbatch(recipe, f"nvidia-{gpus}", out_path=tmp_path / "n.sbatch", partition="gpu_h100",
                        setup=["module load 2024", "source ~/venv/bin/activate"]).read_text()
    opts = _sbatch_options(text)
    assert opts["gpus-per-node"] == str(gpus) and opts["partition"] == "gpu_h100"
    assert "hsn0" not in text and "MIOPEN" not in text and "mask_cpu" not in text
    assert "source ~/venv/bin/activate" in text and ">>> EDIT" not in text


def test_options_reach_the_script(recipe: Path, tmp_path: Path) -> None:
    text = write_sbatch(
        recipe, "nvidia-4", out_path=tmp_path / "o.sbatch", signal_seconds=0, max_requeues=3,
        run_args=["--set", "stage2.steps=10 000"], extra_sbatch=["--exclusive"], job_name="nb",
        env={"NCCL_DEBUG": "INFO"}, run_prefix="apptainer exec $SIF",
    ).read_text()
    opts = _sbatch_options(text)
    assert "signal" not in opts and "requeue" in opts and "exclusive" in opts and opts["job-name"] == "nb"
    assert "'stage2.steps=10 000'" in text and 'export NCCL_DEBUG="INFO"' in text
    assert 'RUN_PREFIX="${RUN_PREFIX:-apptainer exec $SIF}"' in text and "-ge 3 ]" in text


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"nodes": 0}, "launch nodes"),
        ({"time": "tomorrow"}, "not a Slurm time"),
        ({"time": "5", "signal_seconds": 600}, "not shorter than the time limit"),
        ({"preset": "lumi-h"}, "launch preset"),
        ({"colour": "red"}, "launch colour"),
    ],
)
def test_bad_options_are_one_line_errors(kwargs: dict, needle: str, recipe: Path, tmp_path: Path) -> None:
    with pytest.raises(LangadaptError, match=needle) as err:
        write_sbatch(recipe, out_path=tmp_path / "x.sbatch", **kwargs)
    assert "\n" not in str(err.value)


def test_missing_recipe(tmp_path: Path) -> None:
    with pytest.raises(LangadaptError, match="recipe file .* not found"):
        write_sbatch(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    "spec, seconds",
    [("30", 1800), ("5:30", 330), ("1:00:00", 3600), ("2-00:00:00", 172800), ("1-12", 129600),
     ("1-0:30", 88200)],
)
def test_slurm_time(spec: str, seconds: int) -> None:
    assert slurm_time_seconds(spec) == seconds


def _launch_options(*argv: str, cluster: ClusterConfig | None = None) -> LaunchOptions:
    """`langadapt launch ARGV`'s options as `cmd_launch` builds them (the CLI's own parser)."""
    from langadapt.cli import build_parser

    args = build_parser().parse_args(["launch", *argv, "--slurm"])
    return LaunchOptions.from_args(args, cluster or ClusterConfig())


def test_argparse_flags(recipe: Path, tmp_path: Path) -> None:
    options = _launch_options(str(recipe), "--preset", "nvidia-8", "--time", "12:00:00", "--account", "gc",
                              "--sbatch=--exclusive", "--out", str(tmp_path / "a.sbatch"), "--set", "x=1",
                              cluster=ClusterConfig(nodes=16))
    assert (options.nodes, options.gpus_per_node, options.run_args) == (16, None, ("--set", "x=1"))
    files = launch_from_options(options, PreparationConfig(cpus=64))
    assert list(files) == [tmp_path / "a.prepare.sbatch", tmp_path / "a.sbatch", tmp_path / "a.submit.sh"]
    assert all(path.read_text() == text for path, text in files.items())
    prepare, train = (tmp_path / "a.prepare.sbatch").read_text(), (tmp_path / "a.sbatch").read_text()
    opts = _sbatch_options(train)
    assert (opts["nodes"], opts["gpus-per-node"], opts["account"]) == ("16", "8", "gc")
    assert "exclusive" in opts and train.count("--set x=1") == 2  # training and evaluate/export
    prep = _sbatch_options(prepare)
    assert (prep["nodes"], prep["cpus-per-task"], prep["account"]) == ("1", "64", "gc")  # account inherited
    assert "exclusive" not in prep and prepare.count("--set x=1") == 1  # --sbatch options are the GPU job's


def test_launch_options_are_frozen_and_take_gpus_per_node_only_where_the_recipe_sets_it(recipe: Path) -> None:
    """Issue 39 item 8: `cmd_launch` wrote the recipe's cluster into the argparse Namespace; now it
    builds these options once and nothing below it can change them. The recipe's default
    `gpus_per_node` (1) would undercut every preset's, so only a value the recipe sets is taken."""
    options = _launch_options(str(recipe), "--setup", "module load x", "--sweep", "nodes=1,2",
                              cluster=ClusterConfig(nodes=4))
    assert (options.nodes, options.gpus_per_node, options.setup, options.sweep) == (4, None, ("module load x",),
                                                                                      ("nodes=1,2",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.nodes = 8  # type: ignore[misc]
    assert _launch_options(str(recipe), cluster=ClusterConfig(gpus_per_node=4)).gpus_per_node == 4


def test_cmd_launch_leaves_the_namespace_as_parsed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from langadapt.cli import build_parser
    from langadapt.cli.launch import cmd_launch

    monkeypatch.chdir(tmp_path)
    recipe = Path(__file__).resolve().parents[2] / "recipes" / "norwegian_warm.yaml"
    args = build_parser().parse_args(["launch", str(recipe), "--slurm", "--dry-run", "--out", "a.sbatch",
                                      "--set", "cluster.nodes=2"])
    before = dict(vars(args))
    assert cmd_launch(args) == 0
    assert vars(args) == before and not list(tmp_path.iterdir())  # and a dry run writes nothing


# --- the script's run/requeue logic, executed with stand-ins for srun and scontrol -------------

FAKE_SRUN = """#!/bin/bash
# Stand-in srun: drop srun options, run the task, forward USR1 to it (as srun does).
while [[ "$1" == --* ]]; do shift; done
"$@" & child=$!
trap 'kill -USR1 $child' USR1
while :; do wait $child; rc=$?; kill -0 $child 2>/dev/null || exit $rc; done
"""
FAKE_SCONTROL = """#!/bin/bash
case "$1" in
  show) echo node001; echo node002 ;;
  requeue) echo "$2" >> "$FAKE_LOG" ;;
esac
"""
TASK = """import os, signal, sys, time
mode = sys.argv[1]
if mode == "wait-usr1":
    got = []
    signal.signal(signal.SIGUSR1, lambda *a: got.append(1))
    open(os.environ["FAKE_LOG"] + ".started", "w").close()
    while not got:
        time.sleep(0.05)
    sys.exit(REQUEUE_EXIT_CODE)
sys.exit(int(mode))
""".replace("REQUEUE_EXIT_CODE", str(REQUEUE_EXIT_CODE))


def _run_script(tmp_path: Path, recipe: Path, mode: str, restarts: int = 0, usr1: bool = False):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "task.py").write_text(TASK)
    cpu = ClusterPreset(name="cpu", tasks_per_node=1)
    script = write_sbatch(recipe, cpu, out_path=tmp_path / "job.sbatch", workdir=tmp_path, max_requeues=2,
                          command=f"{sys.executable} {tmp_path / 'task.py'} {mode}")
    log = tmp_path / f"requeue-{mode}-{restarts}.log"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_LOG": str(log),
           "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "node[001-002]", "SLURM_JOB_NUM_NODES": "2",
           "SLURM_RESTART_COUNT": str(restarts)}
    proc = subprocess.Popen(["bash", str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    if usr1:
        started = Path(str(log) + ".started")
        deadline = time.time() + 30
        while not started.exists() and time.time() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGUSR1)  # what Slurm's --signal=B:USR1@T does to the batch shell
    out, _ = proc.communicate(timeout=60)
    requeued = log.read_text().split() if log.exists() else []
    return proc.returncode, requeued, out


@pytest.mark.parametrize(
    "mode, restarts, usr1, rc, requeued",
    [
        ("0", 0, False, 0, []),  # finished: no requeue
        ("1", 0, False, 1, []),  # crashed: fail, no requeue loop
        (str(REQUEUE_EXIT_CODE), 0, False, 0, ["4242"]),  # run asked for a requeue (e.g. SIGTERM)
        ("wait-usr1", 0, True, 0, ["4242"]),  # time-limit warning: forwarded, checkpoint, requeue
        (str(REQUEUE_EXIT_CODE), 2, False, REQUEUE_EXIT_CODE, []),  # max_requeues reached
    ],
)
def test_requeue_logic(tmp_path: Path, recipe: Path, mode: str, restarts: int, usr1: bool, rc: int,
                       requeued: list[str]) -> None:
    got_rc, got_requeued, out = _run_script(tmp_path, recipe, mode, restarts, usr1)
    assert (got_rc, got_requeued) == (rc, requeued), out
    assert "master node001:24242" in out  # MASTER_ADDR from scontrol show hostnames, port from job id
    if usr1:
        assert "SIGUSR1 (time limit near)" in out


def test_single_process_stages_run_before_and_after_srun(tmp_path: Path, recipe: Path) -> None:
    """data..embeddings in the batch shell, training under srun, then evaluate/export; each step
    only after the previous one succeeded (a failed one stops the job before the queue-long srun)."""
    task = tmp_path / "record.py"
    task.write_text("import json, os, sys\n"
                    "open(os.environ['FAKE_LOG'] + '.steps', 'a').write(json.dumps([os.environ.get('IN_SRUN', ''), sys.argv[1:]]) + '\\n')\n"
                    "sys.exit(int(os.environ.get('FAIL_FLAGS', 'x') in ' '.join(sys.argv)))\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/bash\nwhile [[ \"$1\" == --* ]]; do shift; done\nIN_SRUN=1 exec \"$@\"\n")
    (bin_dir / "scontrol").write_text(FAKE_SCONTROL)
    for name in ("srun", "scontrol"):
        (bin_dir / name).chmod(0o755)
    script = write_sbatch(recipe, ClusterPreset(name="cpu", tasks_per_node=2), out_path=tmp_path / "j.sbatch",
                          workdir=tmp_path, command=f"{sys.executable} {task}", run_args=["--set", "seed=1"])
    log = tmp_path / "fake"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_LOG": str(log), "SLURM_JOB_ID": "7"}

    def steps(fail: str = "x") -> list:
        (tmp_path / "fake.steps").unlink(missing_ok=True)
        subprocess.run(["bash", str(script)], env={**env, "FAIL_FLAGS": fail}, capture_output=True, timeout=60)
        return [json.loads(line) for line in (tmp_path / "fake.steps").read_text().splitlines()]

    r, s = str(recipe), ["--set", "seed=1"]
    assert steps() == [["", [r, "--until", "embeddings", *s]], ["1", [r, "--until", "stage2", *s]], ["", [r, *s]]]
    assert steps(fail="--until embeddings") == [["", [r, "--until", "embeddings", *s]]]  # no srun after it


def test_launch_uses_the_recipes_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from langadapt.cli import main

    monkeypatch.chdir(tmp_path)
    shared = Path(__file__).resolve().parents[2] / "recipes" / "norwegian_warm.yaml"
    recipe = tmp_path / "r.yaml"
    recipe.write_text(shared.read_text().replace("gpus_per_node: 8", "gpus_per_node: 4"))
    assert main(["launch", str(recipe), "--slurm", "--out", "a.sbatch"]) == 0
    opts = _sbatch_options((tmp_path / "a.sbatch").read_text())
    assert (opts["nodes"], opts["ntasks-per-node"], opts["gpus-per-node"]) == ("8", "4", "4")  # cluster.*
    assert main(["launch", str(recipe), "--slurm", "--set", "cluster.nodes=2", "--set", "cluster.gpus_per_node=8",
                 "--out", "b.sbatch"]) == 0
    opts = _sbatch_options((tmp_path / "b.sbatch").read_text())
    assert (opts["nodes"], opts["ntasks-per-node"]) == ("2", "8")  # --set wins
