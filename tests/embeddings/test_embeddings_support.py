"""Tiny tokenizers and models shared by the embeddings tests (no tests of its own).

Two tokenizer families are built from a few KB of inline text in milliseconds:
- GPT-2 / Llama-3 style byte-level BPE (`Ġ`, `Ã¥` spellings);
- Llama-2 / Mistral style SentencePiece BPE: `▁` metaspace with a dummy prefix, `<unk>`, and the
  256 byte-fallback pieces `<0x00>`..`<0xFF>` at ids 3-258.
The English tokenizers never see æ/ø/å, so the Norwegian letters exist in them only as bytes.
"""

from __future__ import annotations

import json

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    BloomConfig,
    GemmaConfig,
    GPT2Config,
    GPTNeoXConfig,
    LlamaConfig,
    MistralConfig,
    OlmoConfig,
    PreTrainedTokenizerFast,
    Qwen2Config,
)

EN_TEXT = [
    "The package manager installs the software and its dependencies on the system.",
    "Each user has a home directory where personal files and settings are stored.",
    "Open the terminal and type the command to update the list of available packages.",
    "The server runs several services, and the administrator checks the logs every day.",
    "A backup of the configuration files should be made before any upgrade.",
    "Network interfaces are configured in a file that the system reads at boot time.",
    "The kernel loads the modules that the hardware needs to work correctly.",
    "Users can change their passwords with a simple command in the shell.",
    "Security updates are published often, so keep the machine up to date.",
    "The web server answers requests and sends pages back to the browser.",
] * 3

NB_TEXT = [
    "Pakkebehandleren installerer programvaren og avhengighetene på systemet.",
    "Hver bruker har en hjemmekatalog der personlige filer og innstillinger lagres.",
    "Åpne terminalen og skriv kommandoen for å oppdatere listen over tilgjengelige pakker.",
    "Tjeneren kjører flere tjenester, og administratoren går gjennom loggene hver dag.",
    "Du bør ta en sikkerhetskopi av oppsettsfilene før en oppgradering.",
    "Nettverksgrensesnittene settes opp i en fil som systemet leser ved oppstart.",
    "Kjernen laster modulene som maskinvaren trenger for å fungere på riktig måte.",
    "Brukere kan endre passordene sine med en enkel kommando i skallet.",
    "Sikkerhetsoppdateringer blir publisert ofte, så hold maskinen oppdatert nå.",
    "Nettjeneren svarer på forespørsler og sender sidene tilbake til nettleseren.",
    "Første gang må du også velge språk, og det blå vinduet viser større skrift.",
    "Både små og store filer får plass på disken, men det er lurt å være forsiktig.",
    "Særlig på eldre maskiner går det tregt; prøv å lukke programmer du ikke trenger.",
] * 3

SPECIALS = ("<s>", "</s>", "<pad>")


def byte_level_tokenizer(
    texts: list[str], vocab_size: int = 400, specials=SPECIALS
) -> PreTrainedTokenizerFast:
    """GPT-2 style byte-level BPE; specials are (bos, eos, pad) in that order of roles."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    bos, eos, pad = specials
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token=eos, pad_token=pad)


def sentencepiece_tokenizer(texts: list[str], vocab_size: int = 400) -> PreTrainedTokenizerFast:
    """Llama-2 style: <unk> <s> </s>, then <0x00>..<0xFF>, then BPE pieces spelled with `▁`."""
    trained = Tokenizer(models.BPE(unk_token="<unk>"))
    trained.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False
    )
    trained.train_from_iterator(texts, trainer)
    spec = json.loads(trained.to_str())["model"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"<0x{b:02X}>": 3 + b for b in range(256)})
    for piece in sorted(spec["vocab"], key=spec["vocab"].get):
        vocab.setdefault(piece, len(vocab))
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in spec["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.decoder = decoders.Sequence(
        [decoders.Metaspace(replacement="▁", prepend_scheme="first"), decoders.ByteFallback()]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def tiny_config(family: str, vocab_size: int, tied: bool):
    """A one-layer, 32-wide config of each supported decoder family."""
    common = {
        "vocab_size": vocab_size,
        "tie_word_embeddings": tied,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": None,
    }
    llama_like = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
    }
    builders = {
        "llama": lambda: LlamaConfig(**llama_like, **common),
        "mistral": lambda: MistralConfig(**llama_like, **common),
        "qwen2": lambda: Qwen2Config(**llama_like, **common),
        "gemma": lambda: GemmaConfig(**llama_like, head_dim=16, **common),
        "olmo": lambda: OlmoConfig(**llama_like, **common),
        "gpt2": lambda: GPT2Config(n_embd=32, n_layer=1, n_head=2, n_positions=64, **common),
        "gpt_neox": lambda: GPTNeoXConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            max_position_embeddings=64,
            **common,
        ),
        "bloom": lambda: BloomConfig(hidden_size=32, n_layer=1, n_head=2, **common),
    }
    return builders[family]()


FAMILIES = ("llama", "mistral", "qwen2", "gemma", "olmo", "gpt2", "gpt_neox", "bloom")


def tiny_model(family: str, vocab_size: int, tied: bool, seed: int = 0):
    """A random tiny model whose untied head differs clearly from its input matrix."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(tiny_config(family, vocab_size, tied))
    if not tied:
        with torch.no_grad():  # make "used the input rows for the head" impossible to miss
            head = model.get_output_embeddings().weight
            head.copy_(torch.randn_like(head) * 0.5 + 3.0)
    return model


def piece_bytes(tokenizer, ids: list[int]) -> bytes:
    """What a list of ids decodes to, as bytes (independent of the code under test)."""
    return tokenizer.decode(ids, skip_special_tokens=False).encode("utf-8")


def test_helper_tokenizers_round_trip_and_have_the_advertised_layout():
    sp, bl = sentencepiece_tokenizer(EN_TEXT), byte_level_tokenizer(EN_TEXT)
    assert sp.convert_ids_to_tokens([0, 1, 2, 3, 258]) == ["<unk>", "<s>", "</s>", "<0x00>", "<0xFF>"]
    assert "å" not in sp.get_vocab() and "Ã¥" not in bl.get_vocab()  # English-only: å exists only as bytes
    for tok in (sp, bl):
        text = "Både små filer på disken"
        assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text
