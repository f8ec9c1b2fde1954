"""Document masking: a packed row attends only within each document, and RoPE numbers each document
from 0, so every document's per-token losses are those of the document run alone."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers.shards import make_shards
from helpers.synthetic import tiny_llama

from langadapt.data.stream import build_stream, document_positions
from langadapt.errors import LangadaptError
from langadapt.recipe import load_recipe
from langadapt.recipe.train import EngineConfig, TrainStageConfig
from langadapt.runtime.placement import DistInfo
from langadapt.train.engines import build_engine
from langadapt.train.fastpath import CausalLMLoss, check_document_masking, model_inputs
from langadapt.train.job import TrainingJob
from langadapt.train.policy import select_trainable

EOS, VOCAB = 0, 64
CPU_ATTENTION = ["eager", "sdpa"]
"""flex_attention passes too on CPU, but compiles its kernel for minutes on two cores: tests/gpu checks it."""


def _documents() -> tuple[torch.Tensor, torch.Tensor]:
    """Two documents of different lengths; the first ends with EOS as the shard writer leaves it."""
    generator = torch.Generator().manual_seed(0)
    first = torch.cat([torch.randint(1, VOCAB, (11,), generator=generator), torch.tensor([EOS])])
    return first, torch.randint(1, VOCAB, (15,), generator=generator)


def _token_losses(model: torch.nn.Module, tokens: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
    """Per-token next-token losses of one row, through the same forward arguments training uses."""
    inputs, labels = tokens[None, :-1], tokens[None, 1:]
    with torch.no_grad():
        logits = model(**model_inputs(model, inputs, positions if positions is None else positions[None, :-1])).logits
    return F.cross_entropy(logits[0].float(), labels[0], reduction="none")


def test_positions_restart_after_each_eos() -> None:
    rows = torch.tensor([[5, 6, 0, 7, 8, 0, 9], [0, 1, 2, 3, 4, 5, 6], [1, 0, 0, 2, 3, 4, 5]])
    assert document_positions(rows, EOS).tolist() == [
        [0, 1, 2, 0, 1, 2, 0], [0, 0, 1, 2, 3, 4, 5], [0, 1, 0, 0, 1, 2, 3]]


@pytest.mark.parametrize("attention", CPU_ATTENTION)
def test_a_packed_row_with_masking_scores_each_document_as_if_alone(attention: str) -> None:
    model = tiny_llama(VOCAB, hidden=64, layers=2, seed=0, attn_implementation=attention).eval()
    first, second = _documents()
    packed = torch.cat([first, second])
    masked = _token_losses(model, packed, document_positions(packed[None], EOS)[0])
    # Losses inside each document (the EOS's target is the next document's first token: no pair alone).
    n = len(first)
    assert torch.allclose(masked[: n - 1], _token_losses(model, first, None), atol=1e-5, rtol=0)
    assert torch.allclose(masked[n:], _token_losses(model, second, None), atol=1e-5, rtol=0)
    # Without masking the second document sees the first: its losses differ (the test can fail).
    unmasked = _token_losses(model, packed, None)
    assert (unmasked[n:] - masked[n:]).abs().max() > 1e-3


@pytest.mark.parametrize("kind", ["torch", "deepspeed"])
def test_engines_take_position_ids_and_train_on_the_masked_loss(kind: str, tmp_path: Path) -> None:
    """Both engines' micro_step with position ids returns the mean masked token loss, and backprops it."""
    model = tiny_llama(VOCAB, hidden=64, layers=2, seed=0)
    first, second = _documents()
    rows = torch.stack([torch.cat([first, second]), torch.cat([second, first])])
    positions = document_positions(rows, EOS)
    expected = torch.cat([_token_losses(model, row, pos) for row, pos in zip(rows, positions)]).mean()
    unmasked = torch.cat([_token_losses(model, row, None) for row in rows]).mean()
    stage = TrainStageConfig(micro_batch_size=2, grad_accum_steps=1, seq_len=rows.shape[1] - 1)
    job = TrainingJob.resolve(stage, EngineConfig(kind=kind, zero_stage=0), tmp_path, seed=0, stage_name="stage2",
                              dist=DistInfo())
    engine = build_engine(model, select_trainable(model, ["*"], "stage2.trainable"), job)
    loss = engine.micro_step(rows[:, :-1], rows[:, 1:], positions[:, :-1])
    assert abs(float(loss) - float(expected)) < 1e-5 and abs(float(loss) - float(unmasked)) > 1e-3
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_masking_is_refused_for_an_attention_that_ignores_positions() -> None:
    model = tiny_llama(VOCAB, hidden=32, layers=1, seed=0)
    model.config._attn_implementation = "paged|sdpa"
    with pytest.raises(LangadaptError, match="data.document_masking: engine.attn_implementation 'paged|sdpa'"):
        check_document_masking(model)


def test_the_stream_gives_position_ids_only_with_masking(tmp_path: Path) -> None:
    shards = make_shards(tmp_path, {"a": 301})
    plain, masked = (build_stream(shards, None, 16, 20, 0, document_masking=on) for on in (False, True))
    batch = torch.from_numpy(masked.next_batch(4))
    assert plain.position_ids(batch[:, :-1]) is None
    assert torch.equal(masked.position_ids(batch[:, :-1]), document_positions(batch[:, :-1], masked.eos_id))


def test_the_loss_module_flattens_rows_for_flash_attention() -> None:
    """flash-attention reads packing from one flattened row plus cumulative lengths (no GPU needed
    to check the arguments; tests/gpu runs the kernel)."""
    model = tiny_llama(VOCAB, hidden=32, layers=1, seed=0)
    model.config._attn_implementation = "flash_attention_2"
    rows = torch.tensor([[3, 4, 0, 5, 6], [7, 0, 8, 9, 1]])
    kwargs = model_inputs(model, rows, document_positions(rows, EOS))
    assert kwargs["input_ids"].tolist() == [[3, 4, 0, 5, 6, 7, 0, 8, 9, 1]]
    assert kwargs["position_ids"].tolist() == [[0, 1, 2, 0, 1, 0, 1, 0, 1, 2]]
    assert kwargs["cu_seq_lens_q"].tolist() == [0, 3, 5, 7, 10] and int(kwargs["max_length_q"]) == 3


def test_flipping_masking_reruns_training_but_not_the_data(tmp_path: Path) -> None:
    from langadapt.pipeline import runner as pipeline

    recipe = tmp_path / "r.yaml"
    body = (Path(__file__).resolve().parents[2] / "recipes" / "tiny_norwegian_warm.yaml").read_text()
    recipe.write_text(body)
    prints = []
    for flag in ("false", "true"):
        loaded = load_recipe(recipe, [f"data.document_masking={flag}"])
        prints.append(pipeline.fingerprints(loaded, pipeline.stage_table(loaded.recipe)))
    assert [prints[0][s] == prints[1][s] for s in ("data", "tokenizer", "embeddings", "stage1", "stage2")] == [
        True, True, True, False, False]


def test_causal_lm_loss_with_positions_equals_the_token_mean() -> None:
    model = tiny_llama(VOCAB, hidden=64, layers=2, seed=0)
    first, second = _documents()
    row = torch.cat([first, second])[None]
    positions = document_positions(row[:, :-1], EOS)
    got = CausalLMLoss(model, fused=False)(row[:, :-1], row[:, 1:], positions)
    assert torch.allclose(got, _token_losses(model, row[0], document_positions(row, EOS)[0]).mean(), atol=1e-6)
