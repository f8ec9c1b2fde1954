"""Load any model folder's tokenizer as a `tokenizers` fast tokenizer: the one loader every stage uses.

Vocabulary surgery, tokenizer inheritance and pre-tokenisation all read the tokenizer's pipeline
(`tokenizer.json`: normaliser, pre-tokeniser, BPE model, byte fallback), so they need a fast
tokenizer. `AutoTokenizer` does not always return one: it picks a backend from `config.json`
and from which files exist, and a Mistral Hub repository that ships `tekken.json` beside
`tokenizer.json` (Mistral-Nemo-Base-2407) loads as `MistralCommonBackend` whenever
`mistral-common` is installed (it comes with vLLM). That backend is the same vocabulary without
the pipeline. And a `qwen2` config.json makes transformers 5 build `Qwen2Tokenizer`'s own
byte-level pipeline around the vocabulary whatever tokenizer.json and tokenizer_config.json say,
so a SentencePiece-style tokenizer saved beside a Qwen2 body silently encodes "å" as `Ã`,`¥`.
Here the fast tokenizer is built from `tokenizer.json` when AutoTokenizer's choice is not a
fast tokenizer or does not run the file's pipeline, converted from `tekken.json` when that is
all there is, and `AutoTokenizer` decides otherwise.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from langadapt.errors import LangadaptError
from langadapt.inputs.files import irregular_files
from langadapt.inputs.text import read_input_json
from langadapt.inputs.tokenizer_json import tokenizer_json_problem

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

log = logging.getLogger("langadapt")
PIPELINE_PARTS = ("normalizer", "pre_tokenizer", "decoder")


def is_fast(tokenizer: object) -> bool:
    """Whether `tokenizer` is backed by a `tokenizers` pipeline (what every stage reads)."""
    return getattr(tokenizer, "backend_tokenizer", None) is not None


def load_tokenizer(folder: Path | str, what: str = "tokenizer") -> PreTrainedTokenizerFast:
    """The fast tokenizer of a model folder; `what` names the folder in the error (e.g. "base_model.path").

    Its tokenizer.json is checked first (`inputs.tokenizer_json`, the preflight check's function): a
    corrupt merge or two tokens on one id is one line naming the entry, not the `tokenizers`
    loader's bare Exception from inside transformers."""
    path = Path(folder)
    if path.is_dir() and (irregular := irregular_files(path)):
        raise LangadaptError(f"{what} {path}: {irregular[0]}")
    written = _checked_tokenizer_json(path / "tokenizer.json", what) if (path / "tokenizer.json").is_file() else None
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    try:
        if (path / "tekken.json").is_file():
            if (path / "tokenizer.json").is_file():  # tokenizer_config.json's specials and flags still apply
                return PreTrainedTokenizerFast.from_pretrained(path)
            return _convert_tekken(path / "tekken.json", what)
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise LangadaptError(f"{what} {path}: no loadable tokenizer ({exc})") from None
    if is_fast(tokenizer) and _runs_the_files_pipeline(tokenizer, written):
        return tokenizer
    if written is not None:
        log.warning("%s %s: AutoTokenizer gives %s, which does not run the folder's tokenizer.json; "
                    "loading tokenizer.json as it is", what, path, type(tokenizer).__name__)
        return PreTrainedTokenizerFast.from_pretrained(path)
    raise LangadaptError(f"{what} {path}: the tokenizer loads as {type(tokenizer).__name__}, not a fast "
                         "(tokenizers) tokenizer, and the folder has no tokenizer.json to load instead")


def _checked_tokenizer_json(file: Path, what: str) -> dict:
    """A model folder's tokenizer.json, parsed, when it is one the `tokenizers` library loads as
    written; else a LangadaptError `what: FILE: entry: why`."""
    written = read_input_json(file, what)
    if problem := tokenizer_json_problem(file, written):
        raise LangadaptError(f"{what}: {problem}")
    return written


def _runs_the_files_pipeline(tokenizer: PreTrainedTokenizerFast, written: dict | None) -> bool:
    """Whether the loaded pipeline is the one in tokenizer.json, parsed: `written` (True when the
    folder has none to compare)."""
    if written is None:
        return True
    loaded = json.loads(tokenizer.backend_tokenizer.to_str())
    model_type = (written.get("model") or {}).get("type")
    return loaded["model"].get("type") == model_type and all(
        loaded.get(part) == written.get(part) for part in PIPELINE_PARTS)


def _convert_tekken(path: Path, what: str) -> PreTrainedTokenizerFast:
    """A Tekken vocabulary converted by transformers' own converter (transformers >= 5)."""
    try:
        from transformers.integrations.mistral import convert_tekken_tokenizer
    except ImportError:
        raise LangadaptError(f"{what} {path.parent}: only tekken.json and this transformers cannot convert it "
                             "(needs transformers >= 5, or save the tokenizer as tokenizer.json)") from None
    return convert_tekken_tokenizer(str(path))
