"""What does embedding initialisation cost at real sizes (32k vocab x 4096 dims, 100 MB corpus)?

Synthetic sizes, real tokenizers: a 32k byte-level BPE trained on the English corpora stands for
the source model's tokenizer, a 32k one trained on the Nordic corpora for the new one, and a
one-layer Llama with hidden size 4096 and untied 32k x 4096 input and output matrices stands for
the model (random weights: only the cost is measured). Reported side by side in one process:

- `mean` through `transfer_embeddings` (mapping + plan + both matrices + resize) against a
  straightforward per-row Python loop computing the same two matrices (the baseline);
- `focus` on a corpus of `--focus-mb` megabytes (the available text repeated to size), fastText
  step included, with the default time budget.

    python benchmarks/embedding_init_cost.py [--focus-mb 100] [--skip-focus]
    python benchmarks/embedding_init_cost.py --smoke   # seconds: 1k x 128, 100 documents each, focus on 0.1 MB

`--smoke` runs the same path at a tiny size (CI): its seconds mean nothing. Without ../shared the
script says so and prints a JSON line of nulls.

Last line: JSON with value = mean's total seconds, baseline = the loop's seconds.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from itertools import cycle
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from langadapt.embeddings import EmbeddingConfig, build_mapping, transfer_embeddings

VOCAB, HIDDEN = 32768, 4096
EN = ["en.python-docs.train", "en.debian-handbook.train", "en.debian-reference.train", "en.gimp-help.train"]
NORDIC = [
    "nb.debian-handbook.train",
    "nn.gimp-help.train",
    "sv.debian-handbook.train",
    "sv.gimp-help.train",
    "da.gimp-help.train",
    "fi.gimp-help.train",
]


def texts(shared: Path, names: list[str]) -> list[str]:
    out = []
    for name in names:
        with gzip.open(shared / "corpora" / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
            out += [json.loads(line)["text"] for line in f]
    return out


def bpe(corpus: list[str], vocab: int) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")


def big_model(vocab: int) -> torch.nn.Module:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=HIDDEN,
        intermediate_size=256,
        num_hidden_layers=1,
        num_attention_heads=32,
        num_key_value_heads=8,
        tie_word_embeddings=False,
    )
    return AutoModelForCausalLM.from_config(config)


@torch.no_grad()
def loop_baseline(model, mapping) -> float:
    """The per-row loop many scripts use, for both matrices (no resize); seconds."""
    start = time.perf_counter()
    for matrix in (model.get_input_embeddings().weight, model.get_output_embeddings().weight):
        fallback = matrix.mean(0)
        new = torch.empty(mapping.new_size, matrix.shape[1])
        for i, pieces in enumerate(mapping.pieces):
            new[i] = matrix[pieces].mean(0) if pieces else fallback
    return time.perf_counter() - start


def time_mean(old_tok, new_tok) -> tuple[float, float, object]:
    """(mean's total seconds, the per-row loop's seconds, mapping), side by side on one model."""
    model = big_model(len(old_tok))
    stamp = time.perf_counter()
    mapping = build_mapping(old_tok, new_tok)
    map_s = time.perf_counter() - stamp
    loop_s = loop_baseline(model, mapping)
    stamp = time.perf_counter()
    model, report = transfer_embeddings(
        model, old_tok, new_tok, EmbeddingConfig(method="mean"), mapping=mapping
    )
    mean_s = map_s + time.perf_counter() - stamp
    timings = report["timings_s"]
    print(f"mapping: {mapping.summary()}")
    print(
        f"mean, {len(new_tok)} x {HIDDEN}, input + untied head: {mean_s:.1f} s (mapping {map_s:.1f} s, plan "
        f"{timings['plan_s']:.1f} s, apply+resize {timings['apply_s']:.1f} s); per-row loop for the same two "
        f"matrices: {loop_s:.1f} s"
    )
    return mean_s, loop_s, mapping


def time_focus(old_tok, new_tok, mapping, nordic: list[str], megabytes: float) -> None:
    """FOCUS with its fastText step on `megabytes` of text (the Nordic texts repeated to size)."""
    corpus, size = [], 0
    for text in cycle(nordic):
        corpus.append(text)
        size += len(text.encode("utf-8"))
        if size >= megabytes * 1e6:
            break
    model = big_model(len(old_tok))
    stamp = time.perf_counter()
    config = EmbeddingConfig(method="focus", max_corpus_mb=megabytes)
    model, report = transfer_embeddings(model, old_tok, new_tok, config, corpus=corpus, mapping=mapping)
    print(
        f"focus on {size / 1e6:.0f} MB (budget {config.fasttext_time_budget_s:.0f} s for fastText incl. "
        f"tokenising): {time.perf_counter() - stamp:.1f} s total; {report['focus']}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    ap.add_argument("--focus-mb", type=float, default=100.0)
    ap.add_argument("--skip-focus", action="store_true")
    ap.add_argument("--smoke", action="store_true",
                    help="vocab 1k x hidden 128 on 100 documents a side, focus on 0.1 MB: seconds (CI), not a measurement")
    args = ap.parse_args()
    metric = "mean_init_s_32k_x_4096"
    if not (args.shared / "corpora").is_dir():
        print(f"needs ../shared/corpora: {args.shared} not found; nothing measured")
        print(json.dumps({"benchmark": "embedding_init_cost", "metric": metric, "value": None, "baseline": None,
                          "ratio": None, "unit": "s", "skipped": "no ../shared"}))
        return
    docs = None
    if args.smoke:
        global VOCAB, HIDDEN
        VOCAB, HIDDEN, docs, args.focus_mb = 1024, 128, 100, 0.1
        metric = "mean_init_s_smoke"
    print(f"torch threads: {torch.get_num_threads()}")
    stamp = time.perf_counter()
    old_tok = bpe(texts(args.shared, EN)[:docs], VOCAB)
    nordic = texts(args.shared, NORDIC)[:docs]
    new_tok = bpe(nordic, VOCAB)
    print(
        f"tokenizers: old {len(old_tok)}, new {len(new_tok)} ({time.perf_counter() - stamp:.1f} s to train)"
    )
    mean_s, loop_s, mapping = time_mean(old_tok, new_tok)
    if not args.skip_focus:
        time_focus(old_tok, new_tok, mapping, nordic, args.focus_mb)
    line = {"benchmark": "embedding_init_cost", "metric": metric, "value": round(mean_s, 2)}
    print(json.dumps({**line, "baseline": round(loop_s, 2), "ratio": round(mean_s / loop_s, 3), "unit": "s"}))


if __name__ == "__main__":
    main()
