"""The torch engine's DDP keeps one copy of the gradients: they are views into its all-reduce buckets.

By default DDP holds its buckets as a second copy of every gradient (the size of the fp32
gradients: 28 GB for 7B), which `plan`'s ZeRO-0 row does not count. On 2 CPU ranks
(tests/helpers/ddp_worker.py) the 21 gradients of a tiny Llama must live in the storage of its one
bucket, also after `zero_grad(set_to_none=True)` (measured without the setting: 21 storages).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import fast_paths

pytestmark = pytest.mark.slow


def test_ddp_gradients_are_bucket_views(tmp_path: Path) -> None:
    fast_paths.check_ddp_gradients_are_bucket_views(tmp_path)  # shared with tests/gpu/test_gpu_fast_paths.py
