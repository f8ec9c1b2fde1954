"""The fast path on CPU: what can be checked without a GPU (the GPU suite checks the kernels)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers.synthetic import tiny_llama

from langadapt.errors import LangadaptError
from langadapt.planning import training as train_settings
from langadapt.planning.training import check_engine
from langadapt.recipe.train import EngineConfig, TrainStageConfig
from langadapt.train.fastpath import CausalLMLoss, compile_blocks, repeated_blocks, use_fused_loss


def test_auto_resolves_off_on_cpu_and_on_for_gpus(monkeypatch) -> None:
    monkeypatch.setattr(train_settings, "liger_available", lambda: True)
    cpu = check_engine("stage2", TrainStageConfig(), EngineConfig(), "cpu")
    gpu = check_engine("stage2", TrainStageConfig(), EngineConfig(), "cuda")
    assert (cpu.compile, cpu.fused_loss) == (False, False)
    assert (gpu.compile, gpu.fused_loss) == (True, True)
    zero2 = check_engine("stage2", TrainStageConfig(), EngineConfig(kind="deepspeed", zero_stage=2), "cuda")
    assert (zero2.compile, zero2.fused_loss) == (True, True)


def test_auto_without_liger_falls_back_and_explicit_true_is_refused(monkeypatch) -> None:
    monkeypatch.setattr(train_settings, "liger_available", lambda: False)
    assert check_engine("stage2", TrainStageConfig(), EngineConfig(), "cuda").fused_loss is False
    with pytest.raises(LangadaptError, match="liger-kernel is not installed"):
        check_engine("stage2", TrainStageConfig(), EngineConfig(fused_loss=True), "cuda")


def test_loss_module_equals_the_plain_cross_entropy_of_the_logits() -> None:
    model = tiny_llama(vocab_size=64, hidden=32, layers=2, seed=0)
    batch = torch.randint(0, 64, (2, 17))
    inputs, labels = batch[:, :-1], batch[:, 1:]
    expected = F.cross_entropy(model(input_ids=inputs).logits.flatten(0, 1), labels.flatten())
    got = CausalLMLoss(model, fused=False)(inputs, labels)
    assert torch.allclose(got, expected, atol=1e-6)
    assert next(iter(CausalLMLoss(model, fused=False).state_dict())).startswith("model.")


@pytest.mark.parametrize("hooks_outside", [False, True])
def test_compile_blocks_compiles_the_decoder_layers_in_place_and_keeps_names_and_values(hooks_outside: bool) -> None:
    model = tiny_llama(vocab_size=64, hidden=32, layers=3, seed=0)
    names = list(model.state_dict())
    assert repeated_blocks(model) is model.model.layers
    assert compile_blocks(model, hooks_outside) == 3
    assert list(model.state_dict()) == names  # checkpoints and DeepSpeed see the same parameters
    for block in model.model.layers:
        if hooks_outside:  # the forward alone (module hooks run eagerly around it: ZeRO-3's fetches)
            assert block._compiled_call_impl is None and "forward" in vars(block)
        else:  # the whole call, hooks included
            assert block._compiled_call_impl is not None and "forward" not in vars(block)
    torch._dynamo.reset()  # the values are checked on two CPU ranks (test_train_multiprocess_zero) and on GPU


def test_fused_loss_is_refused_for_a_head_that_transforms_its_logits() -> None:
    model = tiny_llama(vocab_size=64, hidden=32, layers=1, seed=0)
    model.config.final_logit_softcapping = 30.0  # what Gemma-2 declares
    with pytest.raises(LangadaptError, match="engine.fused_loss"):
        use_fused_loss(model, True)
    assert use_fused_loss(model, False) is False
