"""Stage 1 (frozen body) under multi-rank ZeRO-2 and ZeRO-3, and a two-"node" run on one machine.

- Stage 1 trains only the input embeddings and the LM head; with 2 ranks under ZeRO-2 every
  frozen tensor must come out bit-identical (not merely close): frozen parameters are left out
  of the optimizer, so neither an update nor weight decay may touch them.
- Two `torchrun --nnodes 2 --node_rank {0,1} --master_addr 127.0.0.1` processes of one rank
  each form one job: each rank reads node_rank/local_rank from torchrun's environment, and the
  result matches one plain process within the tolerances of tests/helpers/multiproc.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import multiproc as mp

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("args", [("--zero", "2"), ("--zero", "3", "--activation-checkpointing")],
                         ids=["zero2", "zero3-activation-checkpointing"])
def test_stage1_two_ranks_leaves_frozen_tensors_bit_identical(args: tuple[str, ...], tmp_path: Path) -> None:
    """ZeRO-3: every weight partitioned (fit_worker), the frozen body gathered only as the forward
    and the recompute need it; DeepSpeed before 0.19.8 failed that recompute (settings.ZERO3_FROZEN_RECOMPUTE)."""
    out = tmp_path / "stage1"
    mp.two_ranks(out, "--stage", "stage1", *args, "--steps", "6")
    before = torch.load(out / "initial.pt")
    after = mp.weights(out)
    trained = {"model.embed_tokens.weight", "lm_head.weight"}
    frozen = sorted(set(before) - trained)
    assert len(frozen) == 19  # 2 layers x 9 tensors + the final norm
    changed = [name for name in frozen if not torch.equal(before[name], after[name])]
    assert changed == []
    assert all(not torch.equal(before[name], after[name]) for name in trained)  # and they did train


def test_two_nodes_of_one_rank_match_one_process(tmp_path: Path) -> None:
    out, reference = tmp_path / "nodes", tmp_path / "single"
    mp.two_nodes(out, "--zero", "2")
    infos = mp.dist_infos(out)
    assert [(i["rank"], i["node_rank"], i["local_rank"], i["local_world_size"]) for i in infos] == [
        (0, 0, 0, 1), (1, 1, 0, 1)]
    assert {i["world_size"] for i in infos} == {2} and infos[0]["master_addr"] == "127.0.0.1"
    mp.single(reference, "--zero", "2")
    mp.assert_losses_close(mp.losses(out), mp.losses(reference))
    assert mp.max_weight_diff(mp.weights(out), mp.weights(reference)) <= mp.WEIGHT_ATOL
