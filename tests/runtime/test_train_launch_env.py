"""DistInfo from each launcher's environment, with the variables real launchers set.

The Slurm layouts are copied from what srun 22.05 exports (checked on the single-node test
Slurm); torchrun's and the deepspeed launcher's from their launch code.
"""

from __future__ import annotations

import os

import pytest
import torch.distributed as dist
from helpers.job_env import EXPORTED_ENV_VARS, inherited_env

from langadapt.errors import LangadaptError
from langadapt.runtime import distributed as D
from langadapt.runtime.distributed import DistInfo
from langadapt.runtime.hostlist import expand_nodelist, expand_tasks_per_node
from langadapt.runtime.signals import REQUEUE_EXIT_CODE


def test_no_launcher_is_single_process() -> None:
    info = DistInfo.from_env({})
    assert (info.rank, info.world_size, info.launcher, info.distributed) == (0, 1, "none", False)
    assert info.is_main and info.num_nodes == 1


def test_torchrun_two_nodes() -> None:
    env = {
        "RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "1",
        "MASTER_ADDR": "node0", "MASTER_PORT": "29400", "TORCHELASTIC_RUN_ID": "abc",
    }
    info = DistInfo.from_env(env)
    assert info == DistInfo(5, 1, 8, 4, 1, "node0", 29400, None, "torchrun")
    assert info.num_nodes == 2 and not info.is_main


def test_deepspeed_launcher() -> None:
    # deepspeed/launcher/launch.py: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_SIZE, CROSS_RANK, CROSS_SIZE.
    env = {
        "RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_SIZE": "2", "CROSS_RANK": "1",
        "CROSS_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500",
    }
    info = DistInfo.from_env(env)
    assert (info.rank, info.local_rank, info.local_world_size, info.node_rank) == (3, 1, 2, 1)
    assert info.launcher == "deepspeed" and info.master_addr == "10.0.0.1"


def test_openmpi() -> None:
    env = {
        "OMPI_COMM_WORLD_RANK": "6", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "2",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "MASTER_ADDR": "h1",
    }
    info = DistInfo.from_env(env)
    assert (info.rank, info.local_rank, info.node_rank, info.launcher) == (6, 2, 1, "mpi")


def _srun_env(**over: str) -> dict[str, str]:
    """Task 9 of 16 on node 1 of nid[005-006], as srun exports it."""
    env = {
        "SLURM_JOB_ID": "123456", "SLURM_PROCID": "9", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
        "SLURM_NTASKS": "16", "SLURM_NPROCS": "16", "SLURM_NTASKS_PER_NODE": "8",
        "SLURM_TASKS_PER_NODE": "8(x2)", "SLURM_JOB_NODELIST": "nid[005-006]", "SLURM_STEP_ID": "0",
        "SLURM_STEP_NUM_TASKS": "16", "SLURM_STEP_TASKS_PER_NODE": "8(x2)",
        "SLURM_STEP_NODELIST": "nid[005-006]",
    }
    env.update(over)
    return env


def test_slurm_srun_task() -> None:
    info = DistInfo.from_env(_srun_env())
    assert info == DistInfo(9, 1, 16, 8, 1, "nid005", 20000 + 123456 % 20000, None, "slurm")
    assert info.num_nodes == 2


def test_slurm_master_addr_and_port_from_script_win() -> None:
    info = DistInfo.from_env(_srun_env(MASTER_ADDR="nid005-hsn0", MASTER_PORT="31000"))
    assert (info.master_addr, info.master_port) == ("nid005-hsn0", 31000)


def test_slurm_uneven_tasks_per_node() -> None:
    # 10 tasks on 3 nodes: "4(x2),2"; the task on the last node has a local world of 2.
    env = _srun_env(
        SLURM_PROCID="9", SLURM_LOCALID="1", SLURM_NODEID="2", SLURM_STEP_NUM_TASKS="10",
        SLURM_STEP_TASKS_PER_NODE="4(x2),2", SLURM_STEP_NODELIST="gpu[1-3]",
    )
    info = DistInfo.from_env(env)
    assert (info.world_size, info.local_world_size, info.master_addr) == (10, 2, "gpu1")


def test_slurm_batch_shell_is_not_a_task() -> None:
    # The batch script's own shell has SLURM_PROCID=0, SLURM_NTASKS=16 but no step id: a
    # process started there without srun must not wait for 15 peers.
    env = {k: v for k, v in _srun_env(SLURM_PROCID="0").items() if not k.startswith("SLURM_STEP")}
    assert DistInfo.from_env(env).launcher == "none"


def test_torchrun_inside_slurm_allocation_wins() -> None:
    env = _srun_env(RANK="1", WORLD_SIZE="2", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2", GROUP_RANK="0")
    assert DistInfo.from_env(env).launcher == "torchrun"


def test_backend_override_from_env() -> None:
    assert DistInfo.from_env({"LANGADAPT_DIST_BACKEND": "gloo"}).backend == "gloo"


@pytest.mark.parametrize(
    "env, needle",
    [
        ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK='x'"),
        ({"RANK": "2", "WORLD_SIZE": "2"}, "rank 2 outside world size 2"),
        ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "2"}, "local rank 3"),
        ({"RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "70000"}, "MASTER_PORT 70000"),
        ({"SLURM_PROCID": "0", "SLURM_STEP_ID": "0"}, "SLURM_STEP_NUM_TASKS is not set"),
    ],
)
def test_bad_env_names_the_variable(env: dict[str, str], needle: str) -> None:
    with pytest.raises(LangadaptError, match=needle.replace("(", r"\(")):
        DistInfo.from_env(env)


@pytest.mark.parametrize(
    "nodelist, hosts",
    [
        ("vm", ["vm"]),
        ("nid[001-004]", ["nid001", "nid002", "nid003", "nid004"]),
        ("nid[005-006,010]", ["nid005", "nid006", "nid010"]),
        ("gcn[8,12],tcn1", ["gcn8", "gcn12", "tcn1"]),
        ("node[9-11]", ["node9", "node10", "node11"]),
        ("gpu-a[1-2]-ib", ["gpu-a1-ib", "gpu-a2-ib"]),
        ("x[1-2]c[08-09]", ["x1c08", "x1c09", "x2c08", "x2c09"]),
    ],
)
def test_expand_nodelist(nodelist: str, hosts: list[str]) -> None:
    assert expand_nodelist(nodelist) == hosts


@pytest.mark.parametrize("bad", ["nid[001-004", "nid[a-b]", "nid]1[", ""])
def test_expand_nodelist_rejects_garbage(bad: str) -> None:
    with pytest.raises(LangadaptError):
        expand_nodelist(bad)


def test_expand_tasks_per_node() -> None:
    assert expand_tasks_per_node("8(x2),4") == [8, 8, 4]
    assert expand_tasks_per_node("2") == [2]
    with pytest.raises(LangadaptError, match="SLURM_TASKS_PER_NODE"):
        expand_tasks_per_node("8(2)")


def test_single_process_needs_no_group(monkeypatch: pytest.MonkeyPatch) -> None:
    # (An in-process DeepSpeed test may have left this process's group up: count calls instead.)
    calls = []
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda *a, **k: calls.append((a, k)))
    info = D.init_distributed(DistInfo())
    assert info.backend == "gloo" and calls == []
    assert D.is_main() and info.device().type == "cpu"
    D.barrier()  # no group: a no-op
    D.destroy()


def test_init_distributed_single_process_group(monkeypatch: pytest.MonkeyPatch) -> None:
    # A world of one still gets a real gloo group when asked for (DeepSpeed's case), on a free port.
    for name in EXPORTED_ENV_VARS:
        monkeypatch.setenv(name, "recorded")  # so teardown restores the original (absent) state
        monkeypatch.delenv(name)
    monkeypatch.setattr(D, "free_port", lambda: 29555)
    calls = []
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda *a, **k: calls.append((a, k)))
    info = D.init_distributed(DistInfo(), use_deepspeed=False)
    assert calls == []  # one process without DeepSpeed: nothing to start
    import deepspeed

    monkeypatch.setattr(deepspeed, "init_distributed", lambda **k: calls.append(k))
    info = D.init_distributed(DistInfo(), use_deepspeed=True)
    assert info.master_port == 29555 and calls[0]["auto_mpi_discovery"] is False
    assert (os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["MASTER_PORT"]) == ("0", "1", "29555")
    assert os.environ["LOCAL_SIZE"] == "1"


def test_the_tests_strip_exactly_what_export_env_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """helpers.job_env.EXPORTED_ENV_VARS (test support, not shipped) is what `export_env` writes: a
    new variable there would reach the tests' workers and submitted jobs unless added to it."""
    before = {"PATH": "/bin", "SLURM_JOB_ID": "7"}
    monkeypatch.setattr(D.os, "environ", dict(before))
    monkeypatch.setattr(D.torch.cuda, "is_available", lambda: False)  # LOCAL_SIZE is written on CPU only
    D.export_env(DistInfo(rank=1, local_rank=1, world_size=2, local_world_size=2, master_addr="n0", master_port=29500))
    written = {name for name, value in D.os.environ.items() if before.get(name) != value}
    assert written == set(EXPORTED_ENV_VARS)
    assert inherited_env(D.os.environ) == before


def test_requeue_code_is_distinct() -> None:
    assert REQUEUE_EXIT_CODE not in (0, 1, 2, 124, 137, 143)
