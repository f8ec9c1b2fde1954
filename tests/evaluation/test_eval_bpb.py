"""bits_per_byte against a naive per-token reference and against lm-evaluation-harness itself."""

from __future__ import annotations

import json
import math

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from langadapt.evaluation import bpb
from langadapt.evaluation.bpb import (
    bits_per_byte,
    head_splits_cleanly,
    rolling_windows,
    sequence_loglikelihoods,
)


@pytest.fixture(scope="module")
def model_and_tok(tiny_en_llama):
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(tiny_en_llama).eval(), AutoTokenizer.from_pretrained(
        tiny_en_llama
    )


@pytest.fixture(scope="module")
def texts(shared_texts) -> list[str]:
    """Short real documents in three languages (one longer than the test windows)."""
    nb = shared_texts("nb.debian-handbook.valid", 2)
    en = shared_texts("en.gimp-help.valid", 2)
    fi = shared_texts("fi.gimp-help.valid", 1)
    return [t.strip() for t in (nb[0][:400], nb[1][:150], en[0][:300], en[1][:90], fi[0][:250])]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """On a shared 2-core box two OpenMP threads spin against each other (20x slower for small
    forwards); one thread keeps these tests fast. Restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@torch.inference_mode()
def whole_document_loglikelihood(model, tok, text: str) -> float:
    """One unpadded forward over BOS + the whole document, log-probs summed in float64."""
    ids = tok(text, add_special_tokens=False)["input_ids"]
    logits = model(input_ids=torch.tensor([[tok.bos_token_id] + ids[:-1]])).logits[0].double()
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(ids)[:, None]).sum().item()


@torch.inference_mode()
def naive_loglikelihood(model, tok, text: str, context: int) -> float:
    """One forward pass per token: token i sees the `context` tokens before it (BOS first)."""
    ids = tok(text, add_special_tokens=False)["input_ids"]
    seq = [tok.bos_token_id] + ids
    total = 0.0
    for i, target in enumerate(ids):
        ctx = seq[max(0, i + 1 - context) : i + 1]
        logits = model(input_ids=torch.tensor([ctx])).logits[0, -1].double()
        total += torch.log_softmax(logits, -1)[target].item()
    return total


def test_stride_one_equals_naive_per_token_loop(model_and_tok, texts):
    """With stride 1 every token after the first window sees exactly `window` tokens of context."""
    model, tok = model_and_tok
    window, short = 12, [t[:120] for t in texts[:3]]
    lls, _ = sequence_loglikelihoods(model, tok, short, window=window, stride=1, batch_size=16)
    for text, ll in zip(short, lls):
        assert ll == pytest.approx(naive_loglikelihood(model, tok, text, window), abs=1e-3)


def test_bits_per_byte_formula_matches_reference_sums(model_and_tok, texts):
    """Pooled over documents: -sum(ll)/bytes/ln2 and exp(-sum(ll)/words), words as lm-eval counts."""
    model, tok = model_and_tok
    window = 512  # longer than every test document, so each is scored in one window
    result = bits_per_byte(model, tok, texts, window=window, stride=window, batch_size=3)
    reference = sum(whole_document_loglikelihood(model, tok, t) for t in texts)
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    words = sum(len(t.split()) for t in texts)  # stripped texts: same count as lm-eval's re.split
    assert result["bytes"] == n_bytes and result["words"] == words
    assert result["tokens"] == sum(len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts)
    assert result["nll_nats"] == pytest.approx(-reference, rel=1e-6)
    assert result["bits_per_byte"] == pytest.approx(-reference / n_bytes / math.log(2), rel=1e-6)
    assert result["word_perplexity"] == pytest.approx(math.exp(-reference / words), rel=1e-5)
    assert result["tokens_per_second"] > 0


def test_batching_and_order_do_not_change_the_result(model_and_tok, texts):
    model, tok = model_and_tok
    one = sequence_loglikelihoods(model, tok, texts, window=32, stride=32, batch_size=1)[0]
    many = sequence_loglikelihoods(model, tok, texts, window=32, stride=32, batch_size=7)[0]
    reversed_ = sequence_loglikelihoods(model, tok, texts[::-1], window=32, stride=32, batch_size=4)[0]
    assert many == pytest.approx(one, abs=1e-3)
    assert reversed_[::-1] == pytest.approx(one, abs=1e-3)


def test_chunked_head_equals_the_models_own_forward(model_and_tok, texts, monkeypatch):
    """Scored positions through the head in chunks (tiny chunks here, so rows span chunks and
    batches mix padded rows) give what the full logits give."""
    model, tok = model_and_tok
    assert head_splits_cleanly(model, torch.device("cpu"))
    monkeypatch.setattr(bpb, "HEAD_CHUNK_ROWS", 7)
    chunked = sequence_loglikelihoods(model, tok, texts, window=40, stride=15, batch_size=3)[0]
    monkeypatch.setattr(bpb, "head_splits_cleanly", lambda *_: False)
    whole = sequence_loglikelihoods(model, tok, texts, window=40, stride=15, batch_size=3)[0]
    assert chunked == pytest.approx(whole, abs=1e-4)


def test_models_whose_logits_are_not_head_of_body_use_their_own_forward(model_and_tok, texts):
    """A logit soft-cap (Gemma-2 style) breaks head(base_model(x)); such a model is still scored right."""
    model, tok = model_and_tok

    class SoftCapped(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner, self.config = inner, inner.config

        @property
        def base_model(self):
            return self.inner.base_model

        def get_output_embeddings(self):
            return self.inner.get_output_embeddings()

        def forward(self, **kwargs):
            out = self.inner(**kwargs)
            out.logits = 5.0 * torch.tanh(out.logits / 5.0)
            return out

    capped = SoftCapped(model).eval()
    assert not head_splits_cleanly(capped, torch.device("cpu"))
    ids = tok(texts[3], add_special_tokens=False)["input_ids"]
    with torch.inference_mode():
        logits = capped(input_ids=torch.tensor([[tok.bos_token_id] + ids[:-1]])).logits[0].double()
    expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(ids)[:, None]).sum().item()
    assert sequence_loglikelihoods(capped, tok, [texts[3]])[0][0] == pytest.approx(expected, abs=1e-4)


def test_windows_cover_each_token_once_and_never_score_the_prefix():
    ids = list(range(100, 137))  # 37 tokens
    for window, stride in [(10, 10), (10, 4), (10, 1), (64, 64)]:
        scored = []
        for w in rolling_windows(0, ids, prefix_id=1, window=window, stride=stride):
            assert len(w.input_ids) <= window
            scored += w.labels[len(w.labels) - w.n_scored :]
            if w.input_ids[0] == 1:  # the prefix only ever appears as context
                assert w.labels[0] == ids[0]
        assert scored == ids
    with pytest.raises(ValueError):
        list(rolling_windows(0, ids, 1, window=4, stride=5))


def test_first_token_is_conditioned_on_bos(model_and_tok):
    model, tok = model_and_tok
    text = "Hello"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert ids[0] != tok.bos_token_id  # the text is scored without special tokens ...
    with torch.inference_mode():  # ... and its first token is predicted from BOS alone
        first = torch.log_softmax(model(input_ids=torch.tensor([[tok.bos_token_id]])).logits[0, -1], -1)[
            ids[0]
        ]
    lls, lengths = sequence_loglikelihoods(model, tok, [text])
    assert lengths == [len(ids)]
    assert lls[0] == pytest.approx(whole_document_loglikelihood(model, tok, text), abs=1e-4)
    single = sequence_loglikelihoods(model, tok, [tok.decode(ids[:1])])[0][0]
    assert single == pytest.approx(first.item(), abs=1e-5)


def test_equals_lm_eval_harness_bits_per_byte(model_and_tok, texts, tmp_path, monkeypatch):
    """Same model, same text, lm-eval's own rolling loglikelihood and aggregation: within 1e-4."""
    lm_eval = pytest.importorskip("lm_eval")
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    model, tok = model_and_tok
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts), "utf-8")
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "local_bpb.yaml").write_text(
        "task: langadapt_local_bpb\ndataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {docs}\n  cache_dir: {tmp_path / 'cache'}\n"
        "test_split: test\noutput_type: loglikelihood_rolling\ndoc_to_text: ''\n"
        "doc_to_target: '{{text}}'\nmetric_list:\n  - metric: bits_per_byte\n  - metric: word_perplexity\n",
        "utf-8",
    )
    window = 32  # several windows per document, so the rolling scheme itself is compared
    lm = HFLM(pretrained=model, tokenizer=tok, max_length=window, batch_size=4)
    manager = TaskManager(include_path=str(tmp_path / "tasks"), include_defaults=False)
    out = lm_eval.simple_evaluate(
        model=lm, tasks=["langadapt_local_bpb"], task_manager=manager, log_samples=False, bootstrap_iters=0
    )
    theirs = out["results"]["langadapt_local_bpb"]
    ours = bits_per_byte(model, tok, texts, window=window, stride=window)
    assert ours["bits_per_byte"] == pytest.approx(theirs["bits_per_byte,none"], abs=1e-4)
    assert ours["word_perplexity"] == pytest.approx(theirs["word_perplexity,none"], rel=1e-4)


def test_long_documents_score_without_a_false_indexing_error_warning(model_and_tok, tiny_en_llama, texts, caplog,
                                                                      monkeypatch):
    """A document longer than the model's context is scored in windows that fit it; transformers'
    "longer than the specified maximum sequence length ... indexing errors" is about running the
    whole sequence at once, so it must not be printed (it was, once per tokenizer, every evaluation)."""
    import logging

    monkeypatch.setattr(logging.getLogger("transformers"), "propagate", True)  # into caplog
    model, _ = model_and_tok
    tok = AutoTokenizer.from_pretrained(tiny_en_llama)  # a fresh one: transformers warns once per instance
    tok.model_max_length = 48
    long = " ".join(texts)
    ids = tok.backend_tokenizer.encode(long, add_special_tokens=False).ids
    assert len(ids) > 3 * tok.model_max_length
    with caplog.at_level(logging.WARNING, logger="transformers"):
        lls, lengths = sequence_loglikelihoods(model, tok, [long], window=48, stride=48)
    assert lengths == [len(ids)] and math.isfinite(lls[0])
    assert "indexing errors" not in caplog.text


def test_a_single_string_is_refused_not_scored_character_by_character(model_and_tok) -> None:
    """A string is an iterable of one-character strings: before the check, each character was
    scored as its own document (10.31 bits per byte for the demo export instead of 4.51)."""
    model, tok = model_and_tok
    text = "Debian er et operativsystem som brukes på mange tjenere."
    with pytest.raises(TypeError, match=r"bits_per_byte: texts must be a list of documents, not a single str"):
        bits_per_byte(model, tok, text, window=64, batch_size=2)
    with pytest.raises(TypeError, match=r"sequence_loglikelihoods: .* not a single bytes"):
        sequence_loglikelihoods(model, tok, text.encode(), window=64, batch_size=2)
    with pytest.raises(TypeError, match=r"texts\[1\] is a int, not a str"):
        bits_per_byte(model, tok, [text, 3], window=64, batch_size=2)
    as_list = bits_per_byte(model, tok, [text], window=64, batch_size=2)
    assert bits_per_byte(model, tok, (text,), window=64, batch_size=2)["bits_per_byte"] == as_list["bits_per_byte"]
