"""Launching fit_worker.py under torchrun from the multi-process tests, and reading its results."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import torch
from safetensors.torch import load_file

from helpers.job_env import inherited_env
from langadapt.runtime.distributed import free_port

HELPERS = Path(__file__).resolve().parent
REPO = HELPERS.parents[1]
WORKER = HELPERS / "fit_worker.py"

# Losses: the ranks' partial gradient sums are added in another order than one process adds
# them (fp32 rounding, ~1e-7 relative per addition). Measured: <= 2e-7 relative on losses and
# <= 1e-6 absolute on weights after 8 AdamW steps; the bounds leave two orders of margin.
# Weights get a looser bound than losses: AdamW divides by sqrt(v), so an element whose gradient
# is near zero can turn a rounding-sized gradient difference into an lr-sized step difference.
LOSS_RTOL = 1e-5
WEIGHT_ATOL = 1e-4


def env() -> dict[str, str]:
    """CPU DeepSpeed without compiling anything (on a GPU machine DeepSpeed finds the GPU, as the GPU
    suite's workers need); LOCAL_SIZE is left to init_distributed on purpose.

    An in-process DeepSpeed test earlier in this pytest process exported its own single-process
    layout (and the port its store still listens on); the workers must not inherit it. The checkout
    goes first on PYTHONPATH and what was there stays after it: on the GPU machine the packages it
    lacks come from a --target folder on PYTHONPATH (tests/gpu/setup.sh)."""
    inherited = inherited_env()
    accelerator = {} if torch.cuda.is_available() else {"DS_ACCELERATOR": "cpu"}
    python_path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))
    return {**inherited, **accelerator, "PYTHONPATH": python_path, "OMP_NUM_THREADS": "1"}


def torchrun_cmd(out: Path, *args: str, nproc: int = 2, nnodes: int = 1, node_rank: int = 0,
                 port: int | None = None, worker: Path = WORKER) -> list[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}"]
    if nnodes > 1:
        cmd += [f"--nnodes={nnodes}", f"--node_rank={node_rank}", "--master_addr=127.0.0.1",
                f"--master_port={port}"]
    else:
        cmd += ["--standalone"]
    return [*cmd, str(worker), str(out), *args]


def run(cmd: list[str], log: Path, timeout: float = 240, extra_env: dict[str, str] | None = None) -> None:
    with open(log, "a") as f:
        done = subprocess.run(cmd, env={**env(), **(extra_env or {})}, stdout=f, stderr=subprocess.STDOUT, timeout=timeout, check=False)
    assert done.returncode == 0, f"{' '.join(cmd)} exited {done.returncode}:\n{log.read_text()[-3000:]}"


def single(out: Path, *args: str) -> None:
    """The same worker as one plain process (no launcher at all)."""
    run([sys.executable, str(WORKER), str(out), *args], out.with_suffix(".log"))


def two_ranks(out: Path, *args: str, worker: Path = WORKER, extra_env: dict[str, str] | None = None) -> None:
    run(torchrun_cmd(out, *args, worker=worker), out.with_suffix(".log"), extra_env=extra_env)


def two_nodes(out: Path, *args: str, timeout: float = 240) -> None:
    """Two torchrun "nodes" of one process each, rendezvousing on 127.0.0.1."""
    port = free_port()
    log = out.with_suffix(".log")
    procs = []
    with open(log, "a") as f:
        for node in (0, 1):
            cmd = torchrun_cmd(out, *args, nproc=1, nnodes=2, node_rank=node, port=port)
            procs.append(subprocess.Popen(cmd, env=env(), stdout=f, stderr=subprocess.STDOUT))
        codes = [p.wait(timeout=timeout) for p in procs]
    assert codes == [0, 0], f"node exit codes {codes}:\n{log.read_text()[-3000:]}"


def losses(out: Path) -> dict[int, float]:
    """Loss per step from metrics.jsonl; a step re-run after a resume keeps its last value."""
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {row["step"]: row["loss"] for row in rows}


def weights(out: Path) -> dict[str, torch.Tensor]:
    return load_file(str(out / "model" / "model.safetensors"))


def max_weight_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)


def assert_losses_close(a: dict[int, float], b: dict[int, float]) -> None:
    assert a.keys() == b.keys() and a
    worst = max(abs(a[s] - b[s]) / abs(b[s]) for s in a)
    assert worst <= LOSS_RTOL, f"loss relative difference {worst:.2e} > {LOSS_RTOL}: {a} vs {b}"


def dist_infos(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("dist-*.json"))]


def kill_at_step(cmd: list[str], out: Path, step: int, timeout: float = 240) -> None:
    """Start `cmd`, wait until metrics.jsonl shows `step`, then SIGKILL it and every child.

    torchrun puts its workers in sessions of their own, so killing its process group would
    leave them running: the whole process tree is killed, as a node failure would.
    """
    log = out.with_suffix(".log")
    with open(log, "a") as f:
        proc = subprocess.Popen(cmd, env=env(), stdout=f, stderr=subprocess.STDOUT)
    deadline = time.time() + timeout
    metrics = out / "metrics.jsonl"
    while time.time() < deadline:
        if metrics.exists() and any(s >= step for s in _steps(metrics)):
            break
        assert proc.poll() is None, f"run ended before step {step}:\n{log.read_text()[-3000:]}"
        time.sleep(0.05)
    tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    for p in tree:
        p.send_signal(signal.SIGKILL)
    psutil.wait_procs(tree, timeout=30)
    proc.wait()


def step_sequence(out: Path) -> list[int]:
    """The steps logged in metrics.jsonl, in order, repeats included (a resume logs again)."""
    return _steps(out / "metrics.jsonl")


def _steps(metrics: Path) -> list[int]:
    steps = []
    for line in metrics.read_text().splitlines():
        try:
            steps.append(json.loads(line)["step"])
        except (ValueError, KeyError):  # a line being written right now
            pass
    return steps


def fault_one_rank(cmd: list[str], out: Path, rank: int, at_step: int, sig: signal.Signals,
                   extra_env: dict[str, str] | None = None, timeout: float = 120) -> tuple[int | None, float]:
    """Start `cmd` (torchrun), send `sig` to the worker of global rank `rank` once metrics.jsonl
    shows `at_step`, and wait for torchrun. Returns (exit code or None if it hung past `timeout`,
    seconds from the signal to torchrun's exit). Everything left is SIGKILLed before returning,
    so a hang fails the test instead of the suite."""
    log = out.with_suffix(".log")
    with open(log, "a") as f:
        proc = subprocess.Popen(cmd, env={**env(), **(extra_env or {})}, stdout=f, stderr=subprocess.STDOUT)
    deadline = time.time() + timeout
    while not ((out / "metrics.jsonl").exists() and any(s >= at_step for s in _steps(out / "metrics.jsonl"))):
        assert proc.poll() is None and time.time() < deadline, f"no step {at_step}:\n{log.read_text()[-3000:]}"
        time.sleep(0.05)
    workers = psutil.Process(proc.pid).children(recursive=True)
    victim = next(p for p in workers if p.environ().get("RANK") == str(rank))
    victim.send_signal(sig)
    start = time.monotonic()
    try:
        code: int | None = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        code = None
    elapsed = time.monotonic() - start
    for p in [psutil.Process(proc.pid), *workers] if code is None else workers:
        if p.is_running():
            p.kill()
    proc.wait()
    return code, elapsed
