"""A rank that dies or freezes in a 2-rank run takes the job down in under a minute, never a hang.

On a cluster a hung job holds every GPU until the time limit; a job that exits lets Slurm
requeue it (and `fit` resumes from the latest complete checkpoint). Two failure shapes:
- a rank killed outright (OOM killer, segfault, SIGKILL): its sockets close, the survivor's next
  collective fails at once, and torchrun stops the others;
- a rank that stops answering (a frozen process, a node cut off without a TCP reset): nothing
  closes, so only the collective timeout (`LANGADAPT_DIST_TIMEOUT_S`, ten minutes by default,
  seconds here) ends the wait; DeepSpeed's own groups must honour it too.
The runs are the real ZeRO-2 loop of tests/helpers/fit_worker.py under torchrun, on gloo.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from helpers import multiproc as mp

from langadapt.errors import LangadaptError
from langadapt.runtime.distributed import TIMEOUT_ENV, collective_timeout

EXIT_WITHIN_S = 60.0
ARGS = ("--zero", "2", "--steps", "200", "--step-sleep", "0.3")  # far more steps than the test waits for


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
def test_a_killed_rank_ends_the_job_with_an_error(rank: int, tmp_path: Path) -> None:
    out = tmp_path / "run"
    code, seconds = mp.fault_one_rank(mp.torchrun_cmd(out, *ARGS), out, rank, at_step=3, sig=signal.SIGKILL)
    print(f"rank {rank} SIGKILLed: torchrun exited {code} after {seconds:.1f} s")
    assert code is not None, f"torchrun still running {seconds:.0f} s after rank {rank} was killed"
    assert code != 0 and seconds < EXIT_WITHIN_S, (code, seconds)
    assert not (out / "result.json").exists()  # nobody reported a finished run


@pytest.mark.slow
def test_a_frozen_rank_ends_the_job_at_the_collective_timeout(tmp_path: Path) -> None:
    out = tmp_path / "run"
    code, seconds = mp.fault_one_rank(mp.torchrun_cmd(out, *ARGS), out, 1, at_step=3, sig=signal.SIGSTOP,
                                      extra_env={TIMEOUT_ENV: "10"})
    print(f"rank 1 SIGSTOPped: torchrun exited {code} after {seconds:.1f} s")
    assert code is not None, f"torchrun still running {seconds:.0f} s after rank 1 froze"
    # 10 s timeout on rank 0, then torchrun's 30 s SIGTERM grace before it SIGKILLs the frozen rank.
    assert code != 0 and seconds < EXIT_WITHIN_S, (code, seconds)
    assert "Timed out" in out.with_suffix(".log").read_text()


def test_collective_timeout_reads_the_environment() -> None:
    assert collective_timeout({}).total_seconds() == 600
    assert collective_timeout({TIMEOUT_ENV: "7.5"}).total_seconds() == 7.5
    for bad in ("soon", "0", "-3"):
        with pytest.raises(LangadaptError, match=TIMEOUT_ENV):
            collective_timeout({TIMEOUT_ENV: bad})
