"""Which embedding initialisation carries the most of an English model into Norwegian, on real vocabularies?

For each base (the demo's tiny-en-llama and three bases carrying REAL vocabularies: Mistral-7B's
SentencePiece with byte fallback, Mistral-Nemo's Tekken, GPT-2's byte-level BPE with tied
embeddings), a new 8k tokenizer is trained on the Norwegian (nb + nn) train text inheriting the
base's conventions (`langadapt.tokenizer.train.train_tokenizer`, as `tokenizer.kind: inherit`
does), and the base is adapted to it once per method. Reported: Bokmål and English held-out bits
per byte at step 0 and after the same short stage 1 for every method (body frozen, only input
embeddings + head train, same steps, batches, seed and optimizer: AdamW b2 0.95, wd 0.1, clip 1.0
as in the NorMistral recipe, a higher LR because the run is short and the model tiny).

Methods: ours (`mean` = FVT, `focus`, `wechsel`) and the baselines in the same warm body (a cold
model is not one): `transformers_resize` (what `resize_token_embeddings` gives: in effect the mean
row), `model_init` (N(0, initializer_range)) and `random_full_cov` (N(mean, cov), the weak `random`
of earlier versions) and, side by side on the same inputs, the published
implementations where they install (benchmarks/embedding_peers.py, in their own venv): `deepfocus`
1.0.1 (FOCUS by its authors; the peer of our `focus`) and mergekit 0.1.5's `tokensurgeon` with
`-a subword` (the mean of the base tokenizer's pieces: the peer of our `mean`). tokensurgeon's
default OMP needs a donor model trained on the new tokenizer, which an adaptation does not have
(with the base as donor it approximates whichever base token has the same id): it is not run.

The real-vocabulary bases: a body that has learned English is needed (a random body says nothing
about what an init carries over), and training a body from scratch per vocabulary costs hours on
2 cores. So each real base is tiny-en-llama's trained body (6 layers, hidden 256) given the real
vocabulary: rows initialised by FVT from tiny-en-llama's own 8k rows, then `--base-steps` of
English embedding-only training with the real tokenizer (tied for the GPT-2 base). Cached in
`--work`. The architecture quirks of the real models (Nemo's head_dim, rope) are covered by the
test matrix (tests/*/test_real_bases*.py), not here.

WECHSEL needs word vectors and a bilingual dictionary, which ../shared lacks: the script trains
fastText (gensim, 100-d, 5 epochs) on the English and Norwegian train text and uses as dictionary
the words spelled identically in both with count >= 5 (the "identical strings" seed dictionary
of unsupervised alignment; Søgaard et al. 2018), so its numbers are a lower bound for WECHSEL
with a real dictionary and Common Crawl vectors.

    python benchmarks/embedding_init.py [--bases demo,mistral-sp-legacy,nemo-tekken,gpt2-tied]
        [--methods transformers_resize,model_init,mean,focus,wechsel,deepfocus,tokensurgeon] [--steps 100] [--threads 1]

A method of ours may name the untied head's rows of new tokens apart, `METHOD:HEAD_INIT` (e.g.
`mean:mean_of_base_head`, `mean:zero`; `embeddings.head_init`); a tied base refuses it (one matrix).

`--smoke` runs the demo base with `transformers_resize` and `mean` at a tiny size (a 1k tokenizer on 100
documents, 2 steps, 8 held-out documents, a temporary --work) in seconds: it checks the script still runs (CI), its
numbers mean nothing. Without ../shared the script says so and prints a JSON line of nulls.

Prints a table per base and, last, one JSON line (value = the worst ratio of a warm init's
step-0 nb bpb to transformers_resize's over all bases; below 1.00 means every warm init beats
what `resize_token_embeddings` gives).
Runs on one thread by default: on shared, oversubscribed cores two OpenMP threads were 4-6x
SLOWER per step here.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerFast

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]
from langadapt.embeddings import EmbeddingConfig, build_mapping, transfer_embeddings
from langadapt.recipe.tokenizer import TokenizerConfig
from langadapt.tokenizer.loading import load_tokenizer
from langadapt.tokenizer.train import train_tokenizer

OURS = ("transformers_resize", "model_init", "random_full_cov", "mean", "focus", "wechsel", "align")
BASELINE = "transformers_resize"
"""The method every ratio is taken against: what a user gets without this tool."""
PEERS = ("deepfocus", "tokensurgeon")
WARM = ("mean", "focus", "wechsel", "align", "deepfocus", "tokensurgeon")
EN_TRAIN = ("en.debian-handbook.train", "en.gimp-help.train", "en.debian-reference.train")
NB_VALID, EN_VALID = "nb.debian-handbook.valid", "en.debian-handbook.valid"


def read(shared: Path, name: str) -> list[str]:
    with gzip.open(shared / "corpora" / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


# --- scoring and training (the same for every method) ----------------------------------------


def windows(tokenizer, texts: list[str], width: int) -> list[tuple[list[int], list[int]]]:
    """Disjoint (input, target) windows; each document starts after BOS; every token scored once."""
    out = []
    for text in texts:
        seq = [tokenizer.bos_token_id] + tokenizer(text, add_special_tokens=False)["input_ids"]
        for start in range(0, len(seq) - 1, width):
            chunk = seq[start : start + width + 1]
            out.append((chunk[:-1], chunk[1:]))
    return out


@torch.inference_mode()
def bits_per_byte(model, wins: list[tuple[list[int], list[int]]], n_bytes: int, batch: int = 8) -> float:
    """-(sum log-likelihood, nats) / UTF-8 bytes / ln 2 (right-padding is never scored)."""
    model.eval()
    nll = 0.0
    for i in range(0, len(wins), batch):
        group = wins[i : i + batch]
        width = max(len(x) for x, _ in group)
        inputs = torch.zeros(len(group), width, dtype=torch.long)
        targets = torch.full((len(group), width), -100, dtype=torch.long)
        for row, (x, y) in enumerate(group):
            inputs[row, : len(x)], targets[row, : len(y)] = torch.tensor(x), torch.tensor(y)
        logits = model(input_ids=inputs).logits
        nll += torch.nn.functional.cross_entropy(
            logits.transpose(1, 2), targets, ignore_index=-100, reduction="sum"
        ).item()
    return nll / n_bytes / math.log(2)


def train_embeddings(model, stream: torch.Tensor, steps: int, args) -> float:
    """Body frozen; only the input matrix and head (one tensor when tied) train; seeded batches."""
    for p in model.parameters():
        p.requires_grad_(False)
    trainable = list({id(p): p for p in (model.get_input_embeddings().weight,
                                         model.get_output_embeddings().weight)}.values())
    for p in trainable:
        p.requires_grad_(True)
    opt = torch.optim.AdamW(trainable, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(1234)
    model.train()
    start = time.perf_counter()
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = args.lr * min(1.0, (step + 1) / args.warmup)
        offsets = torch.randint(0, len(stream) - args.seq - 1, (args.batch,), generator=gen)
        rows = torch.stack([stream[o : o + args.seq + 1] for o in offsets.tolist()])
        logits = model(input_ids=rows[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), rows[:, 1:].flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def token_stream(tokenizer, texts: list[str]) -> torch.Tensor:
    """Documents encoded and joined with EOS (the training stream of both trainings here)."""
    ids: list[int] = []
    for text in texts:
        ids += tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return torch.tensor(ids)


# --- the bases ------------------------------------------------------------------------------


def prepare_base(name: str, args) -> Path:
    """The demo base as it is, or tiny-en-llama's body given a real vocabulary (cached in --work)."""
    demo = args.shared / "models" / "tiny-en-llama"
    if name == "demo":
        return demo
    sys.path.insert(0, str(REPO / "tests"))
    from helpers.real_bases import BASES, build_tokenizer_folder

    folder = args.work / "bases" / f"{name}-{args.base_steps}"
    if (folder / "model.safetensors").is_file():
        return folder
    build_tokenizer_folder(BASES[name], args.shared, folder)
    real = load_tokenizer(folder)
    model = AutoModelForCausalLM.from_pretrained(demo, dtype=torch.float32)
    model, _ = transfer_embeddings(model, load_tokenizer(demo), real, EmbeddingConfig(method="mean"))
    if BASES[name].model["tie_word_embeddings"]:
        model.config.tie_word_embeddings = True
        model.get_output_embeddings().weight = model.get_input_embeddings().weight
    model.config.bos_token_id, model.config.eos_token_id = real.bos_token_id, real.eos_token_id
    model.config.pad_token_id = real.pad_token_id
    english = [t for corpus in EN_TRAIN for t in read(args.shared, corpus)]
    seconds = train_embeddings(model, token_stream(real, english), args.base_steps, args)
    print(f"  base {name}: {len(real)} tokens, {args.base_steps} English embedding steps in {seconds:.0f} s")
    model.save_pretrained(folder)
    return folder


def wechsel_files(args, nb_texts: list[str]) -> dict[str, Path]:
    """fastText vectors for English and Norwegian and an identical-strings dictionary (cached)."""
    out = args.work / "wechsel"
    files = {"source_vectors": out / "en.bin", "target_vectors": out / "nb.bin", "dictionary": out / "dict.tsv"}
    if all(p.is_file() for p in files.values()):
        return files
    from gensim.models import FastText
    from gensim.models.fasttext import save_facebook_model

    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for lang, texts in (("en", [t for c in EN_TRAIN for t in read(args.shared, c)]), ("nb", nb_texts)):
        sentences = [line.split() for text in texts for line in text.splitlines() if line.strip()]
        model = FastText(vector_size=100, window=5, min_count=3, epochs=5, workers=args.threads, seed=1)
        model.build_vocab(corpus_iterable=sentences)
        model.train(corpus_iterable=sentences, total_examples=len(sentences), epochs=model.epochs)
        save_facebook_model(model, str(files["source_vectors" if lang == "en" else "target_vectors"]))
        counts[lang] = Counter(w for s in sentences for w in s)
    shared = sorted(w for w, c in counts["en"].items() if c >= 5 and counts["nb"][w] >= 5 and w.isalpha())
    files["dictionary"].write_text("".join(f"{w}\t{w}\n" for w in shared), encoding="utf-8")
    print(f"  wechsel: fastText en/nb trained, identical-strings dictionary of {len(shared)} words")
    return files


# --- one method on one base ------------------------------------------------------------------


def initialise(method: str, base: Path, new: PreTrainedTokenizerFast, new_dir: Path, data: dict, args):
    """A fresh copy of the base adapted to `new` by one of our methods or a peer implementation."""
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    if method in PEERS:
        from embedding_peers import peer_embeddings

        inputs, head = peer_embeddings(method, base, new_dir, data["corpus"], args.work / "peers" / base.name)
        set_matrices(model, inputs, head)
        return model, {}
    method, _, head_init = method.partition(":")
    extra = data["wechsel"] if method == "wechsel" else {}
    config = EmbeddingConfig(method=method, head_init=head_init or "same", fasttext_workers=1, **extra)
    model, report = transfer_embeddings(model, data["old"], new, config, corpus=data["corpus"], mapping=data["mapping"])
    return model, report.get(method, {})


def set_matrices(model: PreTrainedModel, inputs: torch.Tensor, head: torch.Tensor | None) -> None:
    """Resize to the peer's row count and install its matrices (head None: tied, or peer gave one)."""
    model.resize_token_embeddings(inputs.shape[0])
    with torch.no_grad():
        model.get_input_embeddings().weight.copy_(inputs)
        if head is not None and not model.config.tie_word_embeddings:
            model.get_output_embeddings().weight.copy_(head)


def run_method(method: str, base: Path, new, new_dir: Path, data: dict, args) -> dict:
    """Init with `method`, score nb and en, train stage 1 on Norwegian, score again."""
    stamp = time.perf_counter()
    try:
        model, extra = initialise(method, base, new, new_dir, data, args)
    except Exception as error:  # noqa: BLE001  (a peer that cannot run here is a result, not a crash)
        print(f"  {method:12s} cannot run: {type(error).__name__}: {str(error).splitlines()[0][:200]}", flush=True)
        return {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"}
    init_s = time.perf_counter() - stamp
    row = {"init_s": init_s, "nb0": bits_per_byte(model, data["nb"], data["nb_bytes"]),
           "en0": bits_per_byte(model, data["en"], data["en_bytes"])}
    row["train_s"] = train_embeddings(model, data["stream"], args.steps, args)
    row["nb1"] = bits_per_byte(model, data["nb"], data["nb_bytes"])
    row["en1"] = bits_per_byte(model, data["en"], data["en_bytes"])
    row["extra"] = extra
    print(f"  {method:12s} init {init_s:6.1f} s  nb {row['nb0']:.4f} -> {row['nb1']:.4f}  "
          f"en {row['en0']:.4f} -> {row['en1']:.4f}  ({row['train_s']:.0f} s)", flush=True)
    return row


def cached(args, key: str, compute) -> dict:
    """One result row, kept in --work per setting so a later call (e.g. once the peers install) adds rows."""
    setting = f"s{args.steps}-b{args.base_steps}-{args.batch}x{args.seq}-lr{args.lr}-c{args.eval_chars}"
    if args.vocab_size != 8192 or args.train_docs or args.eval_docs:
        setting += f"-v{args.vocab_size}-d{args.train_docs}-e{args.eval_docs}"
    path = args.work / f"results-{setting}.json"
    results = json.loads(path.read_text()) if path.is_file() else {}
    if key not in results or "error" in results[key]:
        results[key] = compute()
        path.write_text(json.dumps(results, indent=1))
    return results[key]


def run_base(name: str, args) -> dict:
    """Every method on one base: the new tokenizer, the shared inputs, one row per method."""
    print(f"\n== base {name}", flush=True)
    base = prepare_base(name, args)
    old = load_tokenizer(base)
    train = [("nb", t) for t in read(args.shared, "nb.debian-handbook.train")]
    train += [("nn", t) for t in read(args.shared, "nn.gimp-help.train")]
    train = train[: args.train_docs] if args.train_docs else train
    new = train_tokenizer(TokenizerConfig(vocab_size=args.vocab_size, min_vocab_fraction=0.0), train, old, seed=0)
    new_dir = args.work / "tokenizers" / name
    new.save_pretrained(new_dir)
    mapping = build_mapping(old, new)
    print(f"  new tokenizer: {len(new)} tokens; mapping {mapping.summary()}", flush=True)
    nb_valid = [t[: args.eval_chars] for t in read(args.shared, NB_VALID)][: args.eval_docs]
    en_valid = [t[: args.eval_chars] for t in read(args.shared, EN_VALID)][: len(nb_valid)]
    data = {"old": old, "mapping": mapping, "corpus": [t for _, t in train],
            "nb": windows(new, nb_valid, args.seq), "nb_bytes": sum(len(t.encode()) for t in nb_valid),
            "en": windows(new, en_valid, args.seq), "en_bytes": sum(len(t.encode()) for t in en_valid),
            "stream": token_stream(new, [t for _, t in train])}
    if "wechsel" in args.methods:
        data["wechsel"] = wechsel_files(args, data["corpus"])
    base_model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    reference = {"nb": bits_per_byte(base_model, windows(old, nb_valid, args.seq), data["nb_bytes"]),
                 "en": bits_per_byte(base_model, windows(old, en_valid, args.seq), data["en_bytes"])}
    print(f"  base model with its own tokenizer: nb {reference['nb']:.4f}  en {reference['en']:.4f}", flush=True)
    rows = {m: cached(args, f"{name}/{m}", lambda m=m: run_method(m, base, new, new_dir, data, args))
            for m in args.methods}
    return {"reference": reference, "rows": rows, "vocab": len(old), "new_vocab": len(new)}


SAME_METHOD = {"mean": "tokensurgeon", "focus": "deepfocus"}
"""Our method -> the published implementation of the same method (tokensurgeon -a subword = FVT mean)."""


def print_results(results: dict, args) -> dict:
    """A table per base; returns {base: {ours: (step-0 ratio, stage-1 ratio) to the peer}} and prints the JSON."""
    print(f"\nbits/byte (nb = {NB_VALID}, en = {EN_VALID}, each document cut to {args.eval_chars} chars);"
          f" stage 1 = {args.steps} steps x {args.batch} x {args.seq} tokens of nb+nn, lr {args.lr}")
    worst, versus = None, {}
    for name, result in results.items():
        ref, rows = result["reference"], result["rows"]
        print(f"\n{name} (base vocab {result['vocab']}; own tokenizer: nb {ref['nb']:.3f}, en {ref['en']:.3f})")
        print(f"{'method':13s} {'init s':>7s} {'nb step0':>9s} {'nb stage1':>9s} {'en step0':>9s} "
              f"{'en stage1':>9s} {'nb0/base':>8s} {'nb1/base':>8s}")
        rand = rows.get(BASELINE, {})
        for method, row in rows.items():
            if "error" in row:
                print(f"{method:13s} cannot run: {row['error']}")
                continue
            r0 = row["nb0"] / rand["nb0"] if "nb0" in rand else float("nan")
            r1 = row["nb1"] / rand["nb1"] if "nb1" in rand else float("nan")
            print(f"{method:13s} {row['init_s']:7.1f} {row['nb0']:9.4f} {row['nb1']:9.4f} {row['en0']:9.4f} "
                  f"{row['en1']:9.4f} {r0:8.3f} {r1:8.3f}")
            if method.partition(":")[0] in WARM and "nb0" in rand:
                worst = r0 if worst is None else max(worst, r0)
        for ours, peer in SAME_METHOD.items():
            if "nb0" in rows.get(ours, {}) and "nb0" in rows.get(peer, {}):
                pair = (rows[ours]["nb0"] / rows[peer]["nb0"], rows[ours]["nb1"] / rows[peer]["nb1"])
                versus.setdefault(name, {})[ours] = pair
                print(f"{ours} / {peer} (same method): nb step 0 {pair[0]:.3f}, after stage 1 {pair[1]:.3f}")
    line = {"benchmark": "embedding_init", "metric": "worst_warm_over_resize_nb_bpb_step0",
            "value": worst, "baseline": 1.0, "ratio": None if worst is None else round(worst, 4),
            "unit": "ratio", "ours_over_peer": {n: {m: [round(x, 4) for x in pair] for m, pair in v.items()}
                                               for n, v in versus.items()},
            "bases": {n: {m: {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items() if k != "extra"}
                          for m, row in r["rows"].items()} for n, r in results.items()}}
    print(json.dumps(line))
    return versus


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    ap.add_argument("--work", type=Path, default=Path("/tmp/langadapt-embedding-init"))
    ap.add_argument("--bases", default="demo,mistral-sp-legacy,nemo-tekken,gpt2-tied")
    ap.add_argument("--methods", default="transformers_resize,model_init,mean,focus,wechsel,deepfocus,tokensurgeon")
    ap.add_argument("--steps", type=int, default=100, help="stage 1 steps on Norwegian")
    ap.add_argument("--base-steps", type=int, default=200, help="English embedding steps giving a real vocabulary to the body")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--eval-chars", type=int, default=4000, help="characters kept of each valid document")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--vocab-size", type=int, default=8192, help="the new tokenizer's vocabulary")
    ap.add_argument("--train-docs", type=int, default=None, help="only the first N nb+nn train documents")
    ap.add_argument("--eval-docs", type=int, default=None, help="only the first N valid documents of each language")
    ap.add_argument("--smoke", action="store_true",
                    help="demo base, transformers_resize and mean, tiny sizes, a temporary --work: seconds (CI), not a measurement")
    args = ap.parse_args()
    if args.smoke:
        args.bases, args.methods, args.steps, args.batch, args.seq, args.warmup = "demo", "transformers_resize,mean", 2, 2, 32, 1
        args.eval_chars, args.vocab_size, args.train_docs, args.eval_docs = 300, 1024, 100, 8
    args.methods = args.methods.split(",")
    return args


def main() -> None:
    args = parse_args()
    if not (args.shared / "corpora").is_dir():
        print(f"needs ../shared (corpora, models, tokenizers): {args.shared} not found; nothing measured")
        print(json.dumps({"benchmark": "embedding_init", "metric": "worst_warm_over_resize_nb_bpb_step0",
                          "value": None, "baseline": None, "ratio": None, "unit": "ratio", "skipped": "no ../shared"}))
        return
    torch.set_num_threads(args.threads)
    transformers.utils.logging.disable_progress_bar()
    if args.smoke:  # never the cache of a real run
        with tempfile.TemporaryDirectory() as tmp:
            args.work = Path(tmp)
            print_results({name: run_base(name, args) for name in args.bases.split(",")}, args)
        return
    args.work.mkdir(parents=True, exist_ok=True)
    results = {name: run_base(name, args) for name in args.bases.split(",")}
    print_results(results, args)


if __name__ == "__main__":
    main()
