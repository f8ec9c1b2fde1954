"""Document masking on a GPU: each attention kernel (SDPA with the block-diagonal mask, flex
attention's block mask, flash-attention's variable-length kernel) scores every packed document as
if it were alone, and the fused loss trains on the same masked loss."""

from __future__ import annotations

import importlib.util

import pytest
import torch
import torch.nn.functional as F
from helpers.synthetic import tiny_llama

from langadapt.data.stream import document_positions
from langadapt.train.fastpath import CausalLMLoss, model_inputs

EOS, VOCAB = 0, 512
KERNELS = ["sdpa", "flex_attention"] + (["flash_attention_2"] if importlib.util.find_spec("flash_attn") else [])


def _rows() -> torch.Tensor:
    """Two rows of 256 + 1 tokens, each packing three documents of different lengths (EOS-terminated).

    256: a multiple of flex attention's 128-token block. At 97 tokens torch 2.11's inductor found
    no flex kernel for the block mask (NoValidChoicesError, H100, 2026-11-23); training rows are
    block multiples (seq_len 128 ... 4096), which is what this test is about.
    """
    generator = torch.Generator().manual_seed(0)
    rows = torch.randint(1, VOCAB, (2, 257), generator=generator)
    rows[0, [60, 181]] = EOS
    rows[1, [99, 120]] = EOS
    return rows.cuda()


def _logits(model: torch.nn.Module, inputs: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        return model(**model_inputs(model, inputs, positions)).logits.float().reshape(*inputs.shape, -1)


@pytest.mark.parametrize("attention", KERNELS)
def test_packed_documents_score_as_if_alone(attention: str) -> None:
    """The kernel under test scores the packed rows; each document alone is scored by SDPA on the
    same weights (same seed), so the kernel only ever sees block-aligned lengths."""
    model = tiny_llama(VOCAB, hidden=128, layers=2, seed=0, attn_implementation=attention).cuda().eval()
    reference = tiny_llama(VOCAB, hidden=128, layers=2, seed=0, attn_implementation="sdpa").cuda().eval()
    rows = _rows()[:, :-1]
    packed = _logits(model, rows, document_positions(rows, EOS))
    for r, row in enumerate(rows):
        starts = [0, *((row == EOS).nonzero().flatten() + 1).tolist(), len(row)]
        for begin, end in zip(starts, starts[1:]):
            alone = _logits(reference, row[None, begin:end], None)[0]
            assert torch.allclose(packed[r, begin:end], alone, atol=3e-2, rtol=0), (attention, r, begin)


def test_the_fused_loss_trains_on_the_masked_loss() -> None:
    if not importlib.util.find_spec("liger_kernel"):
        pytest.skip("liger-kernel is not installed")
    rows = _rows()
    positions = document_positions(rows[:, :-1], EOS)
    model = tiny_llama(VOCAB, hidden=128, layers=2, seed=0).cuda()
    plain = CausalLMLoss(model, fused=False)(rows[:, :-1], rows[:, 1:], positions)
    fused = CausalLMLoss(model, fused=True)(rows[:, :-1], rows[:, 1:], positions)
    unmasked = F.cross_entropy(model(input_ids=rows[:, :-1]).logits.flatten(0, 1), rows[:, 1:].flatten())
    assert torch.allclose(plain, fused, atol=1e-4) and not torch.allclose(plain, unmasked, atol=1e-4)
