"""The baselines an initialisation is judged against, and the LM-head rows of new tokens (issue 40).

Checked against transformers itself (its resize draw, called on the same matrices), against the
model config (`initializer_range`), and against what each head choice is defined to be.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from test_embeddings_support import EN_TEXT, NB_TEXT, byte_level_tokenizer, tiny_model
from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast

from langadapt.embeddings import EmbeddingConfig, build_mapping, transfer_embeddings
from langadapt.embeddings.draws import sample_resized
from langadapt.errors import LangadaptError


def _with_vocab(spec: dict, extra: list[str]) -> PreTrainedTokenizerFast:
    """The byte-level tokenizer `spec` with `extra` tokens appended to its model's vocabulary."""
    spec = json.loads(json.dumps(spec))
    vocab = spec["model"]["vocab"]
    for token in extra:
        vocab[token] = len(vocab)
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)),
                                   bos_token="<s>", eos_token="</s>", pad_token="<pad>")


@pytest.fixture(scope="module")
def extended():
    """(base, extended): the extension keeps every base token at its id and appends three."""
    spec = json.loads(byte_level_tokenizer(EN_TEXT).backend_tokenizer.to_str())
    return _with_vocab(spec, []), _with_vocab(spec, ["Ã¥", "ĠpÃ¥", "Ã¸"])


def test_transformers_resize_draws_exactly_what_transformers_draws():
    model = tiny_model("llama", 300, tied=False)
    old = model.get_input_embeddings()
    for rows in (300, 5):  # positive definite, and singular (fewer rows than dims): the mean fallback
        source = torch.nn.Embedding(rows, old.weight.shape[1])
        source.weight.data.copy_(old.weight.data[:rows])
        target = torch.nn.Embedding(rows + 10, old.weight.shape[1])
        torch.manual_seed(5)  # transformers draws from the global generator
        model._init_added_embeddings_weights_with_mean(source, target, rows, 10)
        ours = sample_resized(source.weight.data, 10, torch.Generator().manual_seed(5))
        torch.testing.assert_close(ours, target.weight.data[-10:], rtol=1e-5, atol=1e-8)  # matmul order only
    mean = old.weight.data[:5].mean(0)
    assert torch.equal(ours, mean.expand(10, -1))  # the singular case: every row the mean row
    spread = (sample_resized(old.weight.data, 10, torch.Generator()) - old.weight.data.mean(0)).abs().max()
    assert 0 < spread < 1e-3 * old.weight.data.std()  # N(mean, 1e-9 cov): the mean plus tiny noise


def test_transformers_resize_on_an_extension_is_resize_token_embeddings(extended):
    base, new = extended
    ours = tiny_model("llama", len(base), tied=False)
    theirs = tiny_model("llama", len(base), tied=False)
    ours, report = transfer_embeddings(ours, base, new, EmbeddingConfig(method="transformers_resize"), seed=1)
    theirs.resize_token_embeddings(len(new))  # mean_resizing=True is transformers' default
    n = len(base)
    assert report["shared_rows"] == list(range(n)) and report["rows_drawn"] == 3
    for get in ("get_input_embeddings", "get_output_embeddings"):
        a, b = getattr(ours, get)().weight.detach(), getattr(theirs, get)().weight.detach()
        assert torch.equal(a[:n], b[:n])
        # the same distribution, drawn from another generator: both within 1e-3 std of the mean row
        assert torch.allclose(a[n:], b[n:], atol=1e-3 * float(b[:n].std()))


def test_model_init_draws_the_configs_initializer_range(extended, monkeypatch):
    base, new = extended
    model = tiny_model("llama", len(base), tied=False)
    model.config.initializer_range = 0.5
    old_in = model.get_input_embeddings().weight.detach().clone()
    config = EmbeddingConfig(method="model_init", pad_vocab_to_multiple_of=4096)
    model, _ = transfer_embeddings(model, base, new, config)
    rows = model.get_input_embeddings().weight.detach()
    assert torch.equal(rows[: len(base)], old_in)
    fresh = rows[len(base):]  # the three new tokens and the padding rows: 4096 - 401 rows
    assert float(fresh.std()) == pytest.approx(0.5, rel=0.02) and abs(float(fresh.mean())) < 0.01
    model = tiny_model("llama", len(base), tied=False)
    monkeypatch.setattr(type(model.config), "get_text_config", lambda self, **_: SimpleNamespace())  # no such field
    with pytest.raises(LangadaptError, match="initializer_range"):
        transfer_embeddings(model, base, new, EmbeddingConfig(method="model_init"))


@pytest.mark.parametrize("method", ["mean", "transformers_resize"])
def test_head_init_sets_only_the_head_rows_of_tokens_the_base_lacks(method):
    base, new = byte_level_tokenizer(EN_TEXT), byte_level_tokenizer(NB_TEXT)
    mapping = build_mapping(base, new)
    made = {}
    for head_init in ("same", "mean_of_base_head", "zero"):
        model = tiny_model("llama", len(base), tied=False)
        old_head = model.get_output_embeddings().weight.detach().clone()
        config = EmbeddingConfig(method=method, head_init=head_init, pad_vocab_to_multiple_of=64)
        model, report = transfer_embeddings(model, base, new, config, mapping=mapping, seed=2)
        made[head_init] = (model.get_input_embeddings().weight.detach(), model.get_output_embeddings().weight.detach())
        assert report["head_init"] == head_init
    shared = report["shared_rows"]
    lacking = [i for i in range(report["new_rows"]) if i not in set(shared)]
    assert len(shared) > 100 and len(lacking) > 100
    same_in, same_head = made["same"]
    for head_init, (inp, head) in made.items():
        assert torch.equal(inp, same_in)  # the input rows are the method's whatever the head
        assert torch.equal(head[shared], same_head[shared])  # base tokens keep their head rows
    assert torch.equal(made["zero"][1][lacking], torch.zeros(len(lacking), same_head.shape[1]))
    assert torch.allclose(made["mean_of_base_head"][1][lacking], old_head.mean(0).expand(len(lacking), -1))


def test_a_tied_base_refuses_a_separate_head_choice_in_one_line():
    base, new = byte_level_tokenizer(EN_TEXT), byte_level_tokenizer(NB_TEXT)
    with pytest.raises(LangadaptError) as caught:
        transfer_embeddings(tiny_model("gpt2", len(base), tied=True), base, new, EmbeddingConfig(head_init="zero"))
    assert "\n" not in str(caught.value) and "head_init: same" in str(caught.value)
    transfer_embeddings(tiny_model("gpt2", len(base), tied=True), base, new, EmbeddingConfig(head_init="same"))


def test_a_token_the_base_has_is_copied_even_when_it_spells_nothing(extended):
    """Whisper's vocabulary holds "" at id 50,256; its row is the base's, not a hole for the mean."""
    spec = json.loads(extended[0].backend_tokenizer.to_str())
    base, new = _with_vocab(spec, [""]), _with_vocab(spec, ["", "Ã¥"])
    empty = len(base) - 1
    mapping = build_mapping(base, new)
    assert (mapping.status[empty], mapping.pieces[empty]) == ("copied", [empty]) and mapping.extends_base
    model = tiny_model("gpt2", len(base), tied=True)
    row = model.get_input_embeddings().weight[empty].detach().clone()
    model, report = transfer_embeddings(model, base, new, EmbeddingConfig(), mapping=mapping)
    assert torch.equal(model.get_input_embeddings().weight[empty], row) and empty in report["shared_rows"]
    lacking = build_mapping(extended[0], new)  # a base without "": nothing to copy, the mean row
    assert (lacking.status[empty], lacking.pieces[empty]) == ("fallback", [])


def test_unset_head_init_is_the_mean_head_on_an_untied_extension_and_same_otherwise(extended):
    """`default_head_init`, as the transfer applies it: decided from the mapping and the base."""
    from langadapt.recipe.embeddings import default_head_init

    assert [default_head_init(extends, tied) for extends in (True, False) for tied in (False, True)] == [
        "mean_of_base_head", "same", "same", "same"]
    base, new = extended
    config = EmbeddingConfig()  # head_init unset
    assert config.head_init is None
    _, report = transfer_embeddings(tiny_model("llama", len(base), tied=False), base, new, config)
    assert report["head_init"] == "mean_of_base_head"
    _, report = transfer_embeddings(tiny_model("gpt2", len(base), tied=True), base, new, config)
    assert report["head_init"] == "same"  # a tied base: the default falls back, it is not refused
    replacement = byte_level_tokenizer(NB_TEXT)
    _, report = transfer_embeddings(tiny_model("llama", len(base), tied=False), base, replacement, config)
    assert report["head_init"] == "same"
    _, report = transfer_embeddings(tiny_model("llama", len(base), tied=False), base, new,
                                    EmbeddingConfig(head_init="same"))
    assert report["head_init"] == "same"  # a value set wins
