"""Generated sbatch scripts on a real single-node Slurm (Debian's slurmctld + slurmd + munge).

Setup, in order:
- Slurm already answering (`sinfo` shows the node idle): used as it is;
- Slurm installed but not running, and we are root: started by tests/helpers/start_slurm.sh;
- not installed, root, and LANGADAPT_TEST_INSTALL_SLURM=1: apt-get installs it first;
- otherwise the tests skip with the reason. With LANGADAPT_TEST_REQUIRE_SLURM=1 (CI) they fail
  instead, so a broken Slurm set-up cannot pass silently as "skipped".
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from langadapt.runtime.presets import ClusterPreset
from langadapt.runtime.sbatch import write_sbatch
from langadapt.runtime.signals import REQUEUE_EXIT_CODE
from tests.helpers.slurm import submit

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
PACKAGES = ["slurmctld", "slurmd", "slurm-client", "munge"]
CPU_NODE = ClusterPreset(
    name="cpu-test", tasks_per_node=2, cpus_per_task=1,
    env={"LANGADAPT_DIST_BACKEND": "gloo", "OMP_NUM_THREADS": "1"},
)

pytestmark = pytest.mark.slow


def _unavailable(reason: str) -> None:
    if os.environ.get("LANGADAPT_TEST_REQUIRE_SLURM") == "1":
        pytest.fail(f"Slurm required (LANGADAPT_TEST_REQUIRE_SLURM=1) but {reason}")
    pytest.skip(reason)


def _node_idle() -> bool:
    if shutil.which("sinfo") is None:
        return False
    done = subprocess.run(["sinfo", "-h", "-N", "-o", "%t"], capture_output=True, text=True, timeout=20, check=False)
    return done.returncode == 0 and "idle" in done.stdout.split()


def _node_idle_within(seconds: float) -> bool:
    """The node idle, waiting out the jobs of a test file that ran just before (a node is `mix` or
    `comp` for a few seconds after its last job; the sweep's file ran first under xdist)."""
    deadline = time.monotonic() + seconds
    while not _node_idle():
        if time.monotonic() > deadline:
            return False
        time.sleep(1)
    return True


@pytest.fixture(scope="module")
def slurm() -> None:
    """A usable single-node Slurm, or a skip that says why."""
    is_root = os.geteuid() == 0
    if not is_root:  # cannot configure anything: use a running Slurm as it is
        if not _node_idle_within(60):
            _unavailable("no idle Slurm node, and starting Slurm needs root")
        return
    if shutil.which("slurmctld") is None:
        if not (os.environ.get("LANGADAPT_TEST_INSTALL_SLURM") == "1" and shutil.which("apt-get")):
            _unavailable(f"Slurm not installed (apt-get install -y {' '.join(PACKAGES)}; "
                         "or set LANGADAPT_TEST_INSTALL_SLURM=1 as root to let this test install it)")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, timeout=300, check=False)
        done = subprocess.run(["apt-get", "install", "-y", "-qq", *PACKAGES], env=env, capture_output=True,
                              text=True, timeout=600, check=False)
        if done.returncode != 0:
            _unavailable(f"apt-get install {' '.join(PACKAGES)} failed: {done.stderr.strip()[-300:]}")
    # Idempotent and quick when Slurm already runs with its config (short credential lifetime).
    done = subprocess.run(["bash", str(HELPERS / "start_slurm.sh")], capture_output=True, text=True,
                          timeout=120, check=False)
    if done.returncode != 0 or not _node_idle_within(60):
        _unavailable(f"could not start Slurm: {done.stderr.strip() or done.stdout.strip()}")


def _job_state(job: str) -> dict[str, str]:
    out = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True, check=False).stdout
    return dict(item.partition("=")[::2] for item in out.split() if "=" in item)


def _wait(job: str, until: set[str], timeout: float) -> dict[str, str]:
    deadline = time.time() + timeout
    while time.time() < deadline:
        state = _job_state(job)
        if state.get("JobState") in until:
            return state
        time.sleep(0.5)
    subprocess.run(["scancel", job], check=False)
    pytest.fail(f"job {job} not in {until} after {timeout} s: {_job_state(job)}")


def _script(tmp_path: Path, mode: str, **options) -> Path:
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text("name: tiny\n")
    return write_sbatch(
        recipe, CPU_NODE, out_path=tmp_path / f"{mode}.sbatch", workdir=tmp_path, partition="debug",
        command=f"{sys.executable} {HELPERS / 'slurm_task.py'} {mode}", run_args=[str(tmp_path / "out")],
        job_name=mode, prepare=False,  # the helper task is srun's only command, no pipeline around it
        **options,
    )


def test_two_tasks_find_each_other_and_all_reduce(slurm: None, tmp_path: Path) -> None:
    job = submit(_script(tmp_path, "allreduce", time="5", signal_seconds=60))
    state = _wait(job, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"}, timeout=90)
    log = (tmp_path / "logs" / f"allreduce-{job}.out").read_text()
    assert state["JobState"] == "COMPLETED", log
    ranks = [json.loads((tmp_path / "out" / f"rank-{r}.json").read_text()) for r in (0, 1)]
    for r, rec in enumerate(ranks):
        assert (rec["rank"], rec["local_rank"], rec["world_size"], rec["local_world_size"]) == (r, r, 2, 2)
        assert rec["launcher"] == "slurm" and rec["backend"] == "gloo" and rec["device"] == "cpu"
        assert rec["master_port"] == 20000 + int(job) % 20000
        assert rec["allreduce"] == 3.0  # (0 + 1) + (1 + 1): the two ranks really communicated
    assert ranks[0]["master_addr"] == ranks[1]["master_addr"] != ""


def test_scancel_is_not_requeued(slurm: None, tmp_path: Path) -> None:
    # scancel sends SIGTERM to the tasks (which checkpoint and exit with the requeue code) and to
    # the batch shell, which dies with it: a cancelled job must stay cancelled.
    job = submit(_script(tmp_path, "wait", time="5", signal_seconds=60))
    deadline = time.time() + 60
    while not all((tmp_path / "out" / f"started-{r}").exists() for r in (0, 1)):
        assert time.time() < deadline, _job_state(job)
        time.sleep(0.2)
    subprocess.run(["scancel", job], check=True)
    state = _wait(job, {"CANCELLED", "COMPLETED", "FAILED", "PENDING"}, timeout=60)
    time.sleep(3)  # a requeue would show by now
    state = _job_state(job)
    assert (state["JobState"], state["Restarts"]) == ("CANCELLED", "0"), state


def test_time_limit_warning_checkpoints_requeues_and_resumes_training(slurm: None, tmp_path: Path) -> None:
    # The whole chain with the real training loop on 2 srun ranks (DeepSpeed ZeRO-2, gloo):
    # one-minute limit, warning 55 s before it (Slurm's timer is coarse: it lands 5-35 s in);
    # the script forwards SIGUSR1, fit checkpoints and exits with the requeue code, the script
    # requeues, and the second run resumes from that checkpoint and finishes.
    job = submit(_script(tmp_path, "fit", time="1", signal_seconds=55, env={"DS_ACCELERATOR": "cpu"}))
    deadline = time.time() + 150
    while time.time() < deadline:
        state = _job_state(job)
        if state.get("Restarts") == "1" and state.get("JobState") == "PENDING":
            break
        assert state.get("JobState") not in {"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED"}, state
        time.sleep(0.5)
    else:
        pytest.fail(f"job {job} was not requeued: {_job_state(job)}")
    # The second run gets a longer limit, so that its own warning does not stop it too: under
    # load its start-up alone can take most of a minute. (Slurm holds a requeued job back for
    # the credential lifetime, 10 s in the test Slurm's config.)
    subprocess.run(["scontrol", "update", f"JobId={job}", "TimeLimit=5"], check=True)
    state = _wait(job, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, timeout=150)
    log = (tmp_path / "logs" / f"fit-{job}.out").read_text()
    assert state["JobState"] == "COMPLETED" and state["Restarts"] == "1", log
    # srun reports 75, or 143 when --kill-on-bad-exit stopped the slower rank after the first one
    # exited with 75: the script's trap flag requeues either way.
    assert "SIGUSR1 (time limit near)" in log
    assert re.search(rf"srun exited with ({REQUEUE_EXIT_CODE}|143)", log), log
    assert "requeueing job" in log and "restart 1" in log  # both runs appended to one log
    out = tmp_path / "out"
    result = json.loads((out / "result.json").read_text())
    assert 0 < result["resumed_from"] < 100 and result["steps"] == 100  # resumed mid-run, finished
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 101))
    assert [json.loads(p.read_text())["launcher"] for p in sorted(out.glob("dist-*.json"))] == ["slurm"] * 2
