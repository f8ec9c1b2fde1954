"""The GPU suite: skipped, with the reason, on machines without a GPU (CI); `run.sh` runs it on one."""

from __future__ import annotations

import pytest
import torch

NO_GPU = "no GPU here (torch.cuda.is_available() is False): run tests/gpu/run.sh on a GPU machine"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.gpu)
            if not torch.cuda.is_available():
                item.add_marker(pytest.mark.skip(reason=NO_GPU))
