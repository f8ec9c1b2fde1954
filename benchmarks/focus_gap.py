"""Why is our FOCUS behind deepfocus at step 0 (issue 40 item 2)? Each difference closed, measured.

On one base (default: the demo's own base, runs/tiny_english_source/export/model, 4,096 tokens,
untied; else ../shared's tiny-en-llama) and the new 8k tokenizer `benchmarks/embedding_init.py`
trains (nb + nn train text, the base's conventions), step-0 Bokmål and English held-out bits per
byte (embedding_init's scoring: 128-token BOS windows, documents cut to --eval-chars) of:

- our `focus` with its defaults (gensim fastText, centred vectors, rare tokens -> FVT mean, head
  rows built like the input rows),
- our `focus` with one difference to deepfocus 1.0.1 closed at a time: `focus_center_vectors`
  off (deepfocus takes raw cosines), `focus_rare: random` (deepfocus samples tokens without a
  fastText vector), both, and `head_init: mean_of_base_head` (the head rows of new tokens apart),
- deepfocus itself (benchmarks/embedding_peers.py, its own venv) and the two mixes that say which
  matrix carries the gap: deepfocus's input rows with our head rows, and ours with its head rows,
- the baselines `mean` (FVT) and `transformers_resize`, and the uniform line (log2 V / bytes per token).

    python benchmarks/focus_gap.py [--base PATH] [--work DIR] [--variants a,b,...] [--eval-chars 3000]

Prints one line per variant and, last, a JSON line (value: our focus's step-0 nb bpb over
deepfocus's, null unless both ran). CPU only, one thread; ~1 min per variant on 2 cores.
`--smoke` (CI): tiny-en-llama, a 1k tokenizer on 100 documents, 8 held-out documents, the
variants transformers_resize, mean and mean_head_mean: seconds, numbers mean nothing. Without
../shared it says so and prints a JSON line of nulls.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]
from embedding_init import EN_VALID, NB_VALID, bits_per_byte, read, windows

from langadapt.embeddings import EmbeddingConfig, build_mapping, transfer_embeddings
from langadapt.recipe.tokenizer import TokenizerConfig
from langadapt.tokenizer.loading import load_tokenizer
from langadapt.tokenizer.train import train_tokenizer

OURS = {
    "transformers_resize": {"method": "transformers_resize"},
    "mean": {"method": "mean"},
    "focus": {"method": "focus"},
    "focus_raw_cosine": {"method": "focus", "focus_center_vectors": False},
    "focus_rare_random": {"method": "focus", "focus_rare": "random"},
    "focus_raw_rare_random": {"method": "focus", "focus_center_vectors": False, "focus_rare": "random"},
    "focus_head_mean": {"method": "focus", "head_init": "mean_of_base_head"},
    "focus_raw_head_mean": {"method": "focus", "focus_center_vectors": False, "head_init": "mean_of_base_head"},
    "mean_head_mean": {"method": "mean", "head_init": "mean_of_base_head"},
    "mean_head_zero": {"method": "mean", "head_init": "zero"},
}
PEER = ("deepfocus", "deepfocus_in_our_head", "our_in_deepfocus_head", "deepfocus_head_mean")
DEFAULT = ",".join([*OURS, *PEER])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    demo_base = REPO / "runs" / "tiny_english_source" / "export" / "model"
    ap.add_argument("--base", type=Path, default=demo_base if demo_base.is_dir() else None)
    ap.add_argument("--work", type=Path, default=Path("/tmp/langadapt-focus-gap"))
    ap.add_argument("--variants", default=DEFAULT)
    ap.add_argument("--eval-chars", type=int, default=3000)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--vocab-size", type=int, default=8192)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, a temporary --work: seconds (CI)")
    args = ap.parse_args()
    metric = {"benchmark": "focus_gap", "metric": "focus_over_deepfocus_nb_bpb_step0", "unit": "ratio"}
    if not (args.shared / "corpora").is_dir():
        print(f"needs ../shared (corpora, models): {args.shared} not found; nothing measured")
        print(json.dumps({**metric, "value": None, "baseline": None, "ratio": None, "skipped": "no ../shared"}))
        return
    limit = None
    if args.smoke:
        args.base, args.variants, args.eval_chars, args.vocab_size, limit = None, "transformers_resize,mean,mean_head_mean", 300, 1024, 100
        args.work = Path(tempfile.mkdtemp(prefix="focus-gap-smoke-"))
    base = args.base or args.shared / "models" / "tiny-en-llama"
    torch.set_num_threads(1)
    transformers.utils.logging.disable_progress_bar()
    args.work.mkdir(parents=True, exist_ok=True)

    old = load_tokenizer(base)
    train = [("nb", t) for t in read(args.shared, "nb.debian-handbook.train")]
    train += [("nn", t) for t in read(args.shared, "nn.gimp-help.train")]
    train = train[:limit] if limit else train
    new = train_tokenizer(TokenizerConfig(vocab_size=args.vocab_size, min_vocab_fraction=0.0), train, old, seed=0)
    new_dir = args.work / "tokenizer"
    new.save_pretrained(new_dir)
    mapping = build_mapping(old, new)
    corpus = [t for _, t in train]
    nb_valid = [t[: args.eval_chars] for t in read(args.shared, NB_VALID)][: 8 if args.smoke else None]
    en_valid = [t[: args.eval_chars] for t in read(args.shared, EN_VALID)][: len(nb_valid)]
    nb, en = windows(new, nb_valid, args.seq), windows(new, en_valid, args.seq)
    nb_bytes, en_bytes = (sum(len(t.encode()) for t in v) for v in (nb_valid, en_valid))
    tokens = {"nb": sum(len(y) for _, y in nb), "en": sum(len(y) for _, y in en)}
    uniform = {k: math.log2(len(new)) * tokens[k] / b for k, b in (("nb", nb_bytes), ("en", en_bytes))}
    print(f"base {base} ({len(old)} ids); new tokenizer {len(new)} ids; mapping {mapping.summary()}")
    print(f"uniform over {len(new)} tokens: nb {uniform['nb']:.4f}  en {uniform['en']:.4f}", flush=True)

    def score(model) -> dict:
        return {"nb": bits_per_byte(model, nb, nb_bytes), "en": bits_per_byte(model, en, en_bytes)}

    ours_cache: dict[str, dict] = {}
    built: dict[str, dict] = {}

    def ours(name: str):
        if name in built:  # the mixes reuse a variant's matrices (fastText is not trained twice)
            model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
            model.resize_token_embeddings(len(new))
            model.load_state_dict(built[name], strict=False)
            return model
        model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
        config = EmbeddingConfig(**OURS[name], fasttext_workers=1, fasttext_time_budget_s=1e6)
        model, report = transfer_embeddings(model, old, new, config, corpus=corpus, seed=1234, mapping=mapping)
        ours_cache[name] = report.get("focus", {})
        built[name] = {k: v.clone() for k, v in model.state_dict().items() if "embed" in k or "lm_head" in k}
        return model

    peer: dict = {}

    def deepfocus():
        if not peer:
            from embedding_peers import peer_embeddings

            peer["input"], peer["output"] = peer_embeddings("deepfocus", base, new_dir, corpus, args.work / "peer")
        return peer["input"], peer["output"]

    results = {}
    for name in args.variants.split(","):
        if name in OURS:
            model = ours(name)
        else:
            inputs, head = deepfocus()
            model = ours("focus") if name in PEER[1:3] else ours("mean_head_mean" if name.endswith("head_mean") else "focus")
            with torch.no_grad():
                if name in ("deepfocus", "deepfocus_in_our_head", "deepfocus_head_mean"):
                    model.get_input_embeddings().weight.copy_(inputs)
                if name in ("deepfocus", "our_in_deepfocus_head"):
                    model.get_output_embeddings().weight.copy_(head)
        results[name] = score(model)
        extra = ours_cache.get(name, {}) if name in OURS else {}
        print(f"{name:24s} nb {results[name]['nb']:.4f}  en {results[name]['en']:.4f}  {extra}", flush=True)
    ratio = results["focus"]["nb"] / results["deepfocus"]["nb"] if {"focus", "deepfocus"} <= set(results) else None
    print(json.dumps({**metric, "value": ratio, "baseline": 1.0, "ratio": ratio, "base": str(base),
                      "uniform": uniform, "step0": results}))


if __name__ == "__main__":
    main()
