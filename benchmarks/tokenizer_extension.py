"""Benchmark: extending a base tokenizer (continued BPE), langadapt's `extend` vs `bpe-continue`,
beside the replacement tokenizer the same run would train (`inherit`).

For each base (the demo's tiny-en-llama, Mistral-7B SentencePiece in the Hub's legacy form, Nemo
Tekken, GPT-2), +N tokens are learned on the Bokmål train split; every side is measured on the
held-out splits:
- seconds (word counting included; the base is loaded before the clock starts),
- nb and en tokens per UTF-8 byte, and their ratio to the base tokenizer's,
- the guarantees: every base id kept, and held-out text tokenised to a coarsening of the
  base's segmentation (each new token expanded into the base tokens it was merged from gives
  exactly the base's ids).
bpe-continue (PyPI, Rust) runs where installed (`pip install bpe-continue`); a failure is
reported as its first line. The replacement (`inherit`, vocab_size = the base's size, as NorMistral
replaced Mistral's 32k) shows what extension buys against a new vocabulary.

    python benchmarks/tokenizer_extension.py [--new-tokens 8000] [--bases demo,mistral-sp-legacy,...]
                                             [--scale]   # also: Tekken +N on the whole corpus pack
    python benchmarks/tokenizer_extension.py --smoke   # seconds: the demo's base +100 on 10 documents (CI)

`--smoke` runs every side on the demo's base at a tiny size (Tekken's 131k vocabulary alone takes
~20 s to extend): it checks the script still runs, its numbers mean nothing.

The last line is the JSON record: nb tokens per byte on Tekken (else the first base), langadapt vs
bpe-continue.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
sys.path[:0] = [str(REPO), str(REPO / "tests")]
BASES = ("demo", "mistral-sp-legacy", "nemo-tekken", "gpt2-tied")
PACK = ("da.gimp-help", "en.debian-handbook", "en.debian-reference", "en.gimp-help", "en.python-docs",
        "fi.gimp-help", "nb.debian-handbook", "nn.gimp-help", "sv.debian-handbook", "sv.gimp-help")


def read(name: str) -> list[str]:
    with gzip.open(SHARED / "corpora" / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


def load_base(name: str, root: Path) -> Any:
    from langadapt.tokenizer.loading import load_tokenizer

    if name == "demo":
        return load_tokenizer(SHARED / "models" / "tiny-en-llama")
    from helpers.real_bases import BASES as REAL
    from helpers.real_bases import build_tokenizer_folder

    return load_tokenizer(build_tokenizer_folder(REAL[name], SHARED, root / name))


def tokens_per_byte(encode, texts: list[str]) -> float:
    return sum(len(encode(t)) for t in texts) / sum(len(t.encode("utf-8")) for t in texts)


def coarsens(base_json: dict, new_json: dict, base_encode, new_encode, texts: list[str]) -> bool:
    """Every base id kept, and each text's new ids expand (new token -> its two parents) to the base's ids."""
    from helpers.extension import expander

    old_vocab, vocab = base_json["model"]["vocab"], new_json["model"]["vocab"]
    if any(vocab.get(token) != i for token, i in old_vocab.items()):
        return False
    size = max([*old_vocab.values(), *(e["id"] for e in base_json["added_tokens"])]) + 1
    expand = expander(new_json, size)
    return all(expand(new_encode(t)) == base_encode(t) for t in texts)


def measure(name: str, side: str, build, base: Any, held_out: dict[str, list[str]]) -> dict:
    """One side: build it, time it, measure tokens per byte and the guarantees."""
    base_json = json.loads(base.backend_tokenizer.to_str())

    def base_encode(t: str) -> list[int]:
        return base.backend_tokenizer.encode(t, add_special_tokens=False).ids

    start = time.perf_counter()
    try:
        backend = build()
    except Exception as exc:  # noqa: BLE001  (a side that cannot extend this base is a result, not a crash)
        return {"base": name, "side": side, "error": str(exc).splitlines()[0][:110]}
    seconds = time.perf_counter() - start

    def encode(t: str) -> list[int]:
        return backend.encode(t, add_special_tokens=False).ids

    row = {"base": name, "side": side, "seconds": round(seconds, 2), "vocab": backend.get_vocab_size()}
    for lang, texts in held_out.items():
        row[f"{lang}_tpb"] = round(tokens_per_byte(encode, texts), 4)
        row[f"{lang}_vs_base"] = round(row[f"{lang}_tpb"] / tokens_per_byte(base_encode, texts), 3)
    if side != "replace (inherit)":
        new_json = json.loads(backend.to_str())
        row["keeps_ids_and_coarsens"] = coarsens(base_json, new_json, base_encode, encode,
                                                 held_out["nb"] + held_out["en"])
    return row


def sides(base: Any, train: list[str], new_tokens: int) -> dict[str, Any]:
    from langadapt.inputs.model_folder import tokenizer_id_count
    from langadapt.recipe.tokenizer import TokenizerConfig
    from langadapt.tokenizer.train import train_tokenizer

    size = tokenizer_id_count(json.loads(base.backend_tokenizer.to_str()))
    pairs = [("nb", t) for t in train]
    extend = TokenizerConfig(kind="extend", vocab_size=size + new_tokens)
    replace = TokenizerConfig(kind="inherit", vocab_size=size, min_vocab_fraction=0.0)
    built = {"langadapt extend": lambda: train_tokenizer(extend, pairs, base).backend_tokenizer}
    try:
        from bpe_continue import continue_training

        built["bpe-continue"] = lambda: continue_training(base.backend_tokenizer, texts=train,
                                                          vocab_size=size + new_tokens, min_frequency=2,
                                                          max_token_length=24, show_progress=False)
    except ImportError:
        print("bpe-continue is not installed (pip install bpe-continue): its side is skipped")
    built["replace (inherit)"] = lambda: train_tokenizer(replace, pairs, base).backend_tokenizer
    return built


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-tokens", type=int, default=8000)
    parser.add_argument("--bases", default=",".join(BASES))
    parser.add_argument("--scale", action="store_true", help="also Tekken +N on every train file of the pack")
    parser.add_argument("--docs", type=int, default=None, help="only the first N train and held-out documents")
    parser.add_argument("--smoke", action="store_true",
                        help="the demo's base +100 on 10 documents: the script's path in seconds (CI), not a measurement")
    args = parser.parse_args()
    if args.smoke:
        args.bases, args.new_tokens, args.docs, args.scale = "demo", 100, 10, False
    if not (SHARED / "corpora").is_dir():
        print(f"../shared not found at {SHARED}: nothing to measure")
        print(json.dumps({"benchmark": "tokenizer_extension", "metric": "skipped", "value": None,
                          "baseline": None, "ratio": None, "unit": None}))
        return
    import logging

    logging.getLogger("langadapt").setLevel(logging.ERROR)
    train = read("nb.debian-handbook.train")[: args.docs]
    held_out = {"nb": read("nb.debian-handbook.valid")[: args.docs], "en": read("en.debian-handbook.valid")[: args.docs]}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.bases.split(","):
            base = load_base(name, Path(tmp))
            for side, build in sides(base, train, args.new_tokens).items():
                rows.append(measure(name, side, build, base, held_out))
                print(json.dumps(rows[-1]), flush=True)
        if args.scale:
            scale(load_base("nemo-tekken", Path(tmp)), args.new_tokens)

    print(f"\n+{args.new_tokens} tokens on nb.debian-handbook.train ({sum(len(t) for t in train) / 1e6:.2f} M chars)")
    print("| base | side | s | vocab | nb tok/byte | nb vs base | en vs base | ids kept + coarsening |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        if "error" in r:
            print(f"| {r['base']} | {r['side']} | fails: {r['error']} | | | | | |")
            continue
        print(f"| {r['base']} | {r['side']} | {r['seconds']} | {r['vocab']:,} | {r['nb_tpb']:.4f} | "
              f"{r['nb_vs_base']:.3f}x | {r['en_vs_base']:.3f}x | {r.get('keeps_ids_and_coarsens', '-')} |")
    headline = "nemo-tekken" if "nemo-tekken" in args.bases.split(",") else args.bases.split(",")[0]
    ours = next((r for r in rows if r["base"] == headline and r["side"] == "langadapt extend"), None)
    theirs = next((r for r in rows if r["base"] == headline and r["side"] == "bpe-continue"), None)
    value = ours.get("nb_tpb") if ours else None
    baseline = theirs.get("nb_tpb") if theirs else None
    name = "Tekken" if headline == "nemo-tekken" else headline
    print(json.dumps({"benchmark": "tokenizer_extension", "metric": f"nb tokens per byte, {name} + new tokens",
                      "value": value, "baseline": baseline,
                      "ratio": round(value / baseline, 4) if value and baseline else None, "unit": "tokens/byte"}))


def scale(base: Any, new_tokens: int) -> None:
    """Tekken + N on the whole pack: where the time goes (counting words vs the merge loop)."""
    from langadapt.inputs.model_folder import tokenizer_id_count
    from langadapt.recipe.tokenizer import TokenizerConfig
    from langadapt.tokenizer.counting import ChunkCounter  # noqa: F401  (imported before the clock)
    from langadapt.tokenizer.extend import extend_tokenizer, word_rules
    from langadapt.tokenizer.train import count_words

    texts = [(name[:2], t) for name in PACK for t in read(f"{name}.train")]
    base_json = json.loads(base.backend_tokenizer.to_str())
    config = TokenizerConfig(kind="extend", vocab_size=tokenizer_id_count(base_json) + new_tokens)
    start = time.perf_counter()
    words = count_words(config, word_rules(base_json), texts, 0)
    counted = time.perf_counter() - start
    extend_tokenizer(config, words, base)
    total = time.perf_counter() - start
    chars = sum(len(t) for _, t in texts)
    print(f"scale: Tekken +{new_tokens} on the pack ({chars / 1e6:.1f} M chars, {len(words):,} distinct words): "
          f"counting {counted:.1f} s, merge loop + assembly {total - counted:.1f} s, total {total:.1f} s "
          f"({chars / 1e6 / total:.2f} M chars/s)")


if __name__ == "__main__":
    main()
