"""WECHSEL (Minixhofer et al. 2022): new rows from the k nearest old tokens in aligned word-vector spaces.

1. Source- and target-language word vectors (local files; fastText `.bin` with subword n-grams,
   or word2vec text / gensim `.kv`) are aligned with orthogonal Procrustes on the word pairs of
   a bilingual dictionary that both files know (case variants tried, as in the paper's code).
2. Every token gets a vector: its text (bytes decoded, surrounding space stripped) looked up in
   its language's vectors; `.bin` files embed any string through n-grams, word lists only known
   words.
3. Each new token's row = sum over its k most similar old tokens (cosine, aligned space) of
   softmax(similarity / temperature) x old row. Special tokens keep their role; new tokens
   without a vector fall back to their FVT mean (the paper draws them at random).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from langadapt.embeddings.row_plan import PlanBuilder, PlanInputs, RowPlan, mapping_rows
from langadapt.embeddings.vocab import vocab_view
from langadapt.errors import LangadaptError
from langadapt.inputs.text import read_input_text

_ROWS_PER_BATCH = 1024


def load_vectors(path: Path, key: str):
    """Word vectors from a local file as gensim KeyedVectors (FastTextKeyedVectors for `.bin`)."""
    from gensim.models import KeyedVectors  # optional dependency: pip install "langadapt[focus]"
    from gensim.models.fasttext import load_facebook_vectors

    if not path.is_file():
        raise LangadaptError(f"embeddings.{key}: file not found: {path}")
    try:
        if path.suffix == ".bin":
            return load_facebook_vectors(str(path))
        if path.suffix == ".kv":
            return KeyedVectors.load(str(path))
        return KeyedVectors.load_word2vec_format(str(path), binary=False)
    except (OSError, ValueError, UnicodeDecodeError, EOFError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise LangadaptError(f"embeddings.{key}: cannot read word vectors from {path}: {reason}") from err


def read_dictionary(path: Path) -> list[tuple[str, str]]:
    """`source<TAB>target` pairs (whitespace accepted too); malformed lines are skipped."""
    if not path.is_file():
        raise LangadaptError(f"embeddings.dictionary: file not found: {path}")
    pairs = []
    for line in read_input_text(path, "embeddings.dictionary").splitlines():
        parts = line.strip().split("\t") if "\t" in line else line.split()
        if len(parts) == 2:
            pairs.append((parts[0].strip(), parts[1].strip()))
    return pairs


def alignment(source, target, pairs: list[tuple[str, str]], path: Path) -> np.ndarray:
    """Orthogonal R with source_vector @ R ~ target_vector on the dictionary's known pairs."""
    from scipy.linalg import orthogonal_procrustes

    if source.vector_size != target.vector_size:
        raise LangadaptError(
            f"embeddings.source_vectors/target_vectors: dimensions differ ({source.vector_size} vs {target.vector_size})"
        )
    src, tgt = [], []
    for s, t in pairs:
        for s_form in dict.fromkeys((s, s.lower(), s.title())):
            for t_form in dict.fromkeys((t, t.lower(), t.title())):
                if s_form in source.key_to_index and t_form in target.key_to_index:
                    src.append(source[s_form])
                    tgt.append(target[t_form])
    if len(src) < 2:
        raise LangadaptError(
            f"embeddings.dictionary: only {len(src)} pairs of {path} are known to both vector files"
        )
    rotation, _ = orthogonal_procrustes(np.asarray(src), np.asarray(tgt))
    return rotation


def token_vectors(kv, texts: list[str | None]) -> tuple[np.ndarray, np.ndarray]:
    """(vectors, has_vector) for token texts; subword-aware vectors embed any non-empty text."""
    subword = hasattr(kv, "buckets_word")  # FastTextKeyedVectors
    out = np.zeros((len(texts), kv.vector_size), dtype=np.float32)
    found = np.zeros(len(texts), dtype=bool)
    for i, text in enumerate(texts):
        if text and (subword or text in kv.key_to_index):
            out[i] = kv[text]
            found[i] = np.abs(out[i]).sum() > 0
    return out, found


def _texts(tokenizer) -> list[str | None]:
    """Each token's text: its bytes decoded (partial characters dropped), spaces stripped."""
    return [
        None if b is None else b.decode("utf-8", errors="ignore").strip()
        for b in vocab_view(tokenizer).token_bytes
    ]


def _unit(x: np.ndarray) -> torch.Tensor:
    t = torch.as_tensor(x, dtype=torch.float32)
    return t / t.norm(dim=1, keepdim=True).clamp(min=1e-8)


def wechsel_plan(inputs: PlanInputs) -> tuple[RowPlan, dict]:
    """The WECHSEL row plan (module docstring)."""
    cfg, mapping = inputs.config, inputs.mapping
    source = load_vectors(Path(cfg.source_vectors), "source_vectors")
    target = load_vectors(Path(cfg.target_vectors), "target_vectors")
    rotation = alignment(source, target, read_dictionary(Path(cfg.dictionary)), Path(cfg.dictionary))

    old_vecs, old_found = token_vectors(source, _texts(inputs.old_tokenizer)[: inputs.old_rows])
    new_vecs, new_found = token_vectors(target, _texts(inputs.new_tokenizer))
    old_ids = np.flatnonzero(old_found)
    if old_ids.size == 0:
        raise LangadaptError(f"embeddings.source_vectors: no old token has a vector in {cfg.source_vectors}")
    keys = _unit(old_vecs[old_ids] @ rotation)
    k = min(cfg.wechsel_k, old_ids.size)

    builder = PlanBuilder(inputs.rows, inputs.old_rows)
    regular = [i for i, s in enumerate(mapping.status) if s != "special"]  # fallback tokens may have vectors
    targets = np.array([i for i in regular if new_found[i]], dtype=np.int64)
    missing = [i for i in regular if not new_found[i]]
    mapping_rows(builder, mapping, mapping.ids_with("special") + missing)
    for start in range(0, targets.size, _ROWS_PER_BATCH):
        batch = targets[start : start + _ROWS_PER_BATCH]
        sims, idx = torch.topk(_unit(new_vecs[batch]) @ keys.T, k, dim=1)
        weights = torch.softmax(sims.double() / cfg.wechsel_temperature, dim=1)
        builder.add_many(np.repeat(batch, k), old_ids[idx.numpy().ravel()], weights.numpy().ravel())
    info = {
        "matched_rows": int(targets.size),
        "no_vector_rows": len(missing),
        "old_tokens_with_vector": int(old_ids.size),
    }
    return builder.build(), {"wechsel": info}
