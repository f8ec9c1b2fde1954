"""Published embedding-initialisation methods run on the same inputs as ours, for side-by-side benchmarks.

Peers (each computes the embeddings of a new tokenizer for an existing base model):

- ``deepfocus``: FOCUS (Dobler & de Melo, EMNLP 2023), the authors' package ``deepfocus==1.0.1``,
  function ``deepfocus.FOCUS``. It trains a fastText model on the target-language text tokenised
  with the new tokenizer, copies the source rows of tokens both vocabularies share (exact match of
  the DECODED form: byte-level pieces that are not whole UTF-8 characters all decode to U+FFFD and
  get the row of one such source piece), writes tokens fastText has a vector for as a
  sparsemax-weighted mix of shared tokens, and samples the rest (fewer than ``min_count=10``
  occurrences in the corpus) from N(source mean, source std) per dimension, seed 42.
  FOCUS takes ONE matrix (its README replaces the input embeddings only, of a tied model), so it is
  called once for the input matrix and, when the base is untied, once more for the output matrix;
  the second call reuses the cached fastText model (same corpus, tokenizer and settings).
- ``tokensurgeon``: ``mergekit==0.1.5``'s ``mergekit-tokensurgeon`` CLI, the only entry point
  (``mergekit/scripts/tokensurgeon.py`` is a click command that reads and writes model folders), run
  with model = the base and donor = a folder holding the new tokenizer. It copies shared tokens'
  rows and approximates the others with ``--approximation-method subword`` (mean of the base
  embeddings of the base tokenizer's pieces of the token's text), for the input and the untied output
  matrix alike. The corpus is not used.
- ``tokensurgeon-omp`` (its default OMP method) is NOT applicable and is refused: OMP expresses the
  DONOR model's embedding of a new token as a sparse combination of the donor's embeddings of shared
  tokens and replays the coefficients on the base's; with no model trained on the new tokenizer, the
  only donor is the base's own matrix read under the new tokenizer's ids, i.e. the row of whichever
  base token happens to have the same id, so the result approximates an unrelated token.

The peers run in a subprocess of a separate virtual environment, because their dependencies
(fasttext, numba, entmax, fastdist, peft, mergekit's pydantic/click pins) must not enter or change
the main environment; tensors travel as safetensors files in ``work``. Install it once with::

    python -m venv --system-site-packages /tmp/peers
    /tmp/peers/bin/pip install deepfocus==1.0.1 mergekit==0.1.5

(``--system-site-packages`` lets the venv reuse the main environment's torch/transformers instead
of downloading a second copy; pip adds only the missing packages into the venv.) This file is also
the child program: the venv's python runs it with ``deepfocus WORK`` as arguments.

    python benchmarks/embedding_peers.py --smoke   # seconds, no download: which peers run here (CI)
    python benchmarks/embedding_peers.py --smoke --run-peers   # minutes: also runs them, tiny

``--smoke`` needs neither the venv nor ../shared: with a tiny Llama config and a 300-token tokenizer
it writes tokensurgeon's donor folder and reads it back (the part of the peers' path that runs in
this environment), checks each peer's install (import, pinned version), and prints as its last line
the JSON record of benchmarks/README.md with value = the peers that can run here (of the two).
``--run-peers`` also runs each installed peer on that tiny input: minutes, not seconds (deepfocus
compiles its numba kernels first), so the smoke CI runs leaves it out.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedTokenizerBase

PEER_PYTHON = Path("/tmp/peers/bin/python")
PEERS = ("deepfocus", "tokensurgeon")
PINS = {"deepfocus": ("deepfocus", "1.0.1", "deepfocus"),
        "tokensurgeon": ("mergekit", "0.1.5", "mergekit.scripts.tokensurgeon")}
"""peer -> (distribution, pinned version, module that must import)."""
NOT_APPLICABLE = {
    "tokensurgeon-omp": (
        "mergekit-tokensurgeon's OMP approximates the donor model's embedding of each new token from the "
        "donor's embeddings of shared tokens; a bare tokenizer has no donor embeddings "
        "(a tokenizer-only donor folder fails: 'ValueError: Unrecognized model in DONOR. Should have a "
        "`model_type` key in its config.json.'), and the base's weights under the new tokenizer give each "
        "new token the row of the unrelated base token with the same id"),
}
"""Peers that were asked for but cannot produce a meaningful result, with the reason."""
INSTALL = ("python -m venv --system-site-packages /tmp/peers && "
           "/tmp/peers/bin/pip install deepfocus==1.0.1 mergekit==0.1.5")
SOURCE, RESULT = "source.safetensors", "result.safetensors"


def peer_available(peer: str) -> str | None:
    """None if `peer` can run here, else the reason it cannot."""
    if peer in NOT_APPLICABLE:
        return NOT_APPLICABLE[peer]
    if peer not in PEERS:
        return f"unknown peer {peer!r} (known: {', '.join(PEERS)})"
    if not PEER_PYTHON.exists():
        return f"no peer venv at {PEER_PYTHON.parent.parent}; install it with: {INSTALL}"
    dist, version, module = PINS[peer]
    check = (f"import importlib.metadata as m, {module}; v = m.version({dist!r}); "
             f"assert v == {version!r}, f'{dist} {{v}} installed, {version} pinned'")
    done = subprocess.run([str(PEER_PYTHON), "-c", check], check=False, capture_output=True, text=True)
    if done.returncode:
        return done.stderr.strip().splitlines()[-1]
    return None


def peer_embeddings(peer: str, base_dir: Path, new_tokenizer_dir: Path, corpus: list[str],
                    work: Path) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(input matrix, output matrix or None when the base is tied), rows in `new_tokenizer_dir`'s id order."""
    reason = peer_available(peer)
    if reason is not None:
        raise RuntimeError(f"peer {peer} cannot run: {reason}")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    work.mkdir(parents=True, exist_ok=True)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    tied = bool(model.config.tie_word_embeddings)
    weights = {"input": model.get_input_embeddings().weight}
    if not tied:
        weights["output"] = model.get_output_embeddings().weight
    names = {id(p): n for n, p in model.named_parameters()}
    tensor_names = {key: names[id(w)] for key, w in weights.items()}
    matrices = {key: w.detach() for key, w in weights.items()}
    new_tokenizer = AutoTokenizer.from_pretrained(new_tokenizer_dir)
    n_new = len(new_tokenizer)

    if peer == "deepfocus":
        save_file({k: m.contiguous() for k, m in matrices.items()}, work / SOURCE)
        (work / "corpus.txt").write_text("\n".join(corpus) + "\n", encoding="utf-8")
        (work / "paths.json").write_text(json.dumps({"base": str(base_dir), "new": str(new_tokenizer_dir)}))
        _run_child([str(PEER_PYTHON), __file__, "deepfocus", str(work)], work / "deepfocus.log")
        result = load_file(work / RESULT)
    else:
        donor = work / "donor"
        _write_donor(model.config, tensor_names, matrices, new_tokenizer, new_tokenizer_dir, donor)
        out = work / "tokensurgeon-out"
        _run_child([str(PEER_PYTHON), "-m", "mergekit.scripts.tokensurgeon", str(base_dir), str(donor),
                    str(out), "--approximation-method", "subword", "--subword-method", "mean",
                    "--device", "cpu"],
                   work / "tokensurgeon.log")
        result = _read_tensors(out, {tensor_names[k]: k for k in matrices})

    for key, matrix in result.items():
        if matrix.shape != (n_new, matrices[key].shape[1]):
            raise RuntimeError(f"{peer} returned {key} of shape {tuple(matrix.shape)}, "
                               f"expected ({n_new}, {matrices[key].shape[1]})")
    return result["input"], result.get("output")


def _write_donor(config: PretrainedConfig, tensor_names: dict[str, str], matrices: dict[str, torch.Tensor],
                 new_tokenizer: PreTrainedTokenizerBase, new_tokenizer_dir: Path, donor: Path) -> None:
    """A model folder with the new tokenizer: tokensurgeon takes the target vocabulary from a donor model.

    Its weights are zeros (the subword method never reads them) but must have one row per new token:
    tokensurgeon silently zeroes the rows of token ids past the donor's matrix. The special-token ids
    are the new tokenizer's (tokensurgeon copies them into its output config).
    """
    n_new = len(new_tokenizer)
    shutil.rmtree(donor, ignore_errors=True)
    shutil.copytree(new_tokenizer_dir, donor)
    config = config.__class__.from_dict(config.to_dict())
    config.vocab_size = n_new
    config.bos_token_id = new_tokenizer.bos_token_id
    config.eos_token_id = new_tokenizer.eos_token_id
    config.pad_token_id = new_tokenizer.pad_token_id
    config.save_pretrained(donor)
    save_file({tensor_names[k]: torch.zeros(n_new, m.shape[1]) for k, m in matrices.items()},
              donor / "model.safetensors")


def _read_tensors(folder: Path, wanted: dict[str, str]) -> dict[str, torch.Tensor]:
    """{key: tensor} for the tensor names in `wanted` ({name: key}) from a folder's safetensors shards."""
    found = {}
    for shard in sorted(folder.glob("*.safetensors")):
        with safe_open(shard, framework="pt") as f:
            present = set(f.keys())
            found.update({key: f.get_tensor(name) for name, key in wanted.items() if name in present})
    missing = [name for name, key in wanted.items() if key not in found]
    if missing:
        raise RuntimeError(f"{folder} lacks {missing}")
    return found


def _run_child(command: list[str], log: Path) -> None:
    """Run a peer on one thread (shared machines), output into `log`; raise with the log's tail on failure."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false", "XDG_CACHE_HOME": str(log.parent / "cache"),
           "HF_DATASETS_CACHE": str(log.parent / "cache" / "datasets")}
    with log.open("w") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env, check=False)
    if done.returncode:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise RuntimeError(f"{' '.join(command[1:3])} failed ({done.returncode}), see {log}:\n{tail}")


def _deepfocus_child(work: Path) -> None:
    """Runs in the peer venv: FOCUS once per matrix; fastText trains on work/corpus.txt once (then cached)."""
    from deepfocus import FOCUS
    from transformers import AutoTokenizer

    torch.set_num_threads(1)
    paths = json.loads((work / "paths.json").read_text())
    source_tokenizer = AutoTokenizer.from_pretrained(paths["base"])
    target_tokenizer = AutoTokenizer.from_pretrained(paths["new"])
    result = {key: FOCUS(target_tokenizer=target_tokenizer, source_tokenizer=source_tokenizer,
                         source_embeddings=matrix, target_training_data_path=str(work / "corpus.txt"),
                         processes=1).contiguous()
              for key, matrix in load_file(work / SOURCE).items()}
    save_file(result, work / RESULT)


def smoke(run_peers: bool = False) -> None:
    """The peers' path at a tiny size without a download: see the module docstring."""
    import tempfile

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, PreTrainedTokenizerFast

    corpus = [f"Dette er setning nummer {i} om embeddinger og tokeniserere." for i in range(50)]
    english = [f"This is sentence number {i} about embeddings and tokenizers." for i in range(50)]

    def tiny_tokenizer(texts: list[str]) -> PreTrainedTokenizerFast:
        backend = Tokenizer(models.BPE())
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        backend.decoder = decoders.ByteLevel()
        backend.train_from_iterator(texts, trainers.BpeTrainer(
            vocab_size=300, special_tokens=["<s>", "</s>", "<pad>"], show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", pad_token="<pad>")

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        # The base's tokenizer is learned on English, the new one on Bokmål: the peers see shared
        # tokens (the bytes, "nummer", digits) and many new ones, as in the real comparison. With one
        # tokenizer for both there would be no new token, which deepfocus' fastdist cannot take.
        tokenizer = tiny_tokenizer(corpus)
        tokenizer.save_pretrained(work / "new")
        config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                             num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=False)
        names = {"model.embed_tokens.weight": "input", "lm_head.weight": "output"}
        generator = torch.Generator().manual_seed(0)
        matrices = {key: torch.randn(len(tokenizer), 32, generator=generator) for key in names.values()}
        _write_donor(config, {key: name for name, key in names.items()}, matrices, tokenizer, work / "new",
                     work / "donor")
        donor = _read_tensors(work / "donor", names)
        assert {k: tuple(v.shape) for k, v in donor.items()} == {k: (len(tokenizer), 32) for k in matrices}, donor
        print(f"donor folder: written and read back, {len(tokenizer)} rows x 32")
        runnable = []
        for peer in PEERS:
            reason = peer_available(peer)
            if reason is None and not run_peers:
                print(f"{peer}: installed (not run: --run-peers runs it)")
                runnable.append(peer)
            elif reason is None:
                if not (work / "base").is_dir():  # a tiny random base, built only for a peer that runs
                    from transformers import LlamaForCausalLM

                    base_tokenizer = tiny_tokenizer(english)
                    torch.manual_seed(0)
                    LlamaForCausalLM(LlamaConfig(**{**config.to_dict(), "vocab_size": len(base_tokenizer)})
                                     ).save_pretrained(work / "base")
                    base_tokenizer.save_pretrained(work / "base")
                inputs, _ = peer_embeddings(peer, work / "base", work / "new", corpus, work / peer)
                print(f"{peer}: ran, input matrix {tuple(inputs.shape)}")
                runnable.append(peer)
            else:
                print(f"{peer}: cannot run here: {reason}")
    print(json.dumps({"benchmark": "embedding_peers", "metric": "peers_that_run_here", "value": len(runnable),
                      "baseline": len(PEERS), "ratio": round(len(runnable) / len(PEERS), 3), "unit": "peers",
                      "peers": runnable}))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--smoke"] and sys.argv[2:] in ([], ["--run-peers"]):
        smoke(run_peers=sys.argv[2:] == ["--run-peers"])
        sys.exit(0)
    if sys.argv[1:2] != ["deepfocus"] or len(sys.argv) != 3:
        sys.exit(f"usage: {PEER_PYTHON} {__file__} deepfocus WORK  (the child side of peer_embeddings), "
                 f"or: python {__file__} --smoke [--run-peers]")
    _deepfocus_child(Path(sys.argv[2]))
