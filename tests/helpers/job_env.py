"""What a child process a test starts must not inherit from a process that ran a training engine.

`langadapt.runtime.distributed.export_env` writes these variables into the environment of the
process it runs in (torch's env:// rendezvous and DeepSpeed read them there). A child started
later inherits them, and would read its parent's place in the job (and its rendezvous port, still
held by the parent's store) as its own: the tests strip them from a worker's or a submitted job's
environment (`inherited_env`). Test support, not shipped (issue 39): nothing under langadapt/ reads
this list; tests/runtime/test_train_launch_env.py checks it against what `export_env` writes.
Torch-free, so submitting a Slurm job from a test imports no torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

EXPORTED_ENV_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_SIZE")
"""What `export_env` writes (LOCAL_SIZE on CPU only: DeepSpeed's CPU accelerator's devices per node)."""


def inherited_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) less EXPORTED_ENV_VARS: what a child outside the job inherits."""
    env = os.environ if env is None else env
    return {name: value for name, value in env.items() if name not in EXPORTED_ENV_VARS}
