"""The export's tokenizer on REAL vocabularies (tests/helpers/real_bases.py): what a user loads
from the exported folder encodes like the run's tokenizer and keeps the base's files and flags.

Each base is exported twice: with the base's own vocabulary (tokenizer.kind keep_base) and with a
new one trained in its mould (inherit). The run's tokenizer travels as in a run: the tokenizer
stage saves it, the embeddings stage loads and saves it beside the model, the export loads it and
writes the folder; the folder is then checked with plain `AutoTokenizer` (on the Nemo Hub layout
with mistral-common installed that is `MistralCommonBackend`, reading the carried tekken.json).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers.real_bases import BASES

from langadapt.export.folder import write_model_folder
from langadapt.export.verify import probe, verify_folder
from langadapt.export.vocabulary import VOCABULARY_FILES
from langadapt.recipe.tokenizer import TokenizerConfig
from langadapt.tokenizer.loading import load_tokenizer
from langadapt.tokenizer.saving import save_tokenizer, special_token_flags
from langadapt.tokenizer.train import train_tokenizer

pytestmark = pytest.mark.slow  # five real vocabularies (Tekken: 131,072 ids), two exports each: about a minute
NAMES = list(BASES)
ROLES = ("bos_token", "eos_token", "unk_token", "pad_token")
FLAGS = ("add_bos_token", "add_eos_token", "legacy")
TEXTS = ["Norge er et land som", " to  mellomrom, tabulator\tog linjeskift\n", "Ærlig talt: 3,14 % – “sitat” 😀 ẞ",
         "apt-get install -y pakke/stable"]


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory, shared_dir: Path):
    """name -> base model folder, built once per module on first use."""
    from helpers.real_bases import build_base

    root, built = tmp_path_factory.mktemp("real_bases_export"), {}

    def get(name: str) -> Path:
        if name not in built:
            built[name] = build_base(name, shared_dir, root / name)
        return built[name]

    return get


@pytest.fixture(scope="module")
def nb_texts(shared_texts) -> list[tuple[str, str]]:
    return [("nb", t) for t in shared_texts("nb.debian-handbook.train", limit=80)]


def run_folders(base: Path, kind: str, texts: list[tuple[str, str]], root: Path) -> Path:
    """The run's model folder as the export finds it: tokenizer stage -> embeddings stage -> model."""
    from transformers import AutoModelForCausalLM

    tokenizer = train_tokenizer(TokenizerConfig(kind=kind, vocab_size=1600), texts, load_tokenizer(base))
    save_tokenizer(tokenizer, root / "tokenizer")  # the tokenizer stage's save
    tokenizer = load_tokenizer(root / "tokenizer")
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    if kind != "keep_base":
        model.resize_token_embeddings(len(tokenizer))
    model.save_pretrained(root / "model")
    save_tokenizer(tokenizer, root / "model")  # the embeddings stage's save
    return root / "model"


def config_of(folder: Path) -> dict:
    return json.loads((folder / "tokenizer_config.json").read_text())


@pytest.mark.parametrize("kind", ["keep_base", "inherit"])
@pytest.mark.parametrize("name", NAMES)
def test_export_encodes_like_the_run_and_keeps_the_bases_files_and_flags(name, kind, bases, nb_texts, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = bases(name)
    source = run_folders(base, kind, nb_texts, tmp_path / "run")
    run_tokenizer, folder = load_tokenizer(source), tmp_path / "export"
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).eval()
    reference = probe(model, source, TEXTS[0])
    written = write_model_folder(model, source, str(base), folder, "float32", "2GB")
    verify_folder(folder, reference, "float32", max_new_tokens=2)  # the export stage's own check passes

    exported = AutoTokenizer.from_pretrained(folder)
    for text in TEXTS:
        for special in (True, False):
            assert exported(text, add_special_tokens=special)["input_ids"] == \
                run_tokenizer(text, add_special_tokens=special)["input_ids"], (text, special)
    for role in ROLES[:3]:
        assert getattr(exported, f"{role}_id") == getattr(run_tokenizer, f"{role}_id"), role
    if hasattr(exported, "backend_tokenizer"):  # mistral-common's backend always names Tekken's <pad>
        assert exported.pad_token_id == run_tokenizer.pad_token_id

    # The flags are the base's, and they say what encoding does.
    base_config, config = config_of(base), config_of(folder)
    for flag in FLAGS:
        if flag in base_config:
            assert config.get(flag) == base_config[flag], flag
    assert {f: config[f] for f in FLAGS[:2]} == special_token_flags(run_tokenizer)
    assert config_of(source.parent / "tokenizer").get("add_bos_token") == config["add_bos_token"]
    roles = json.loads((folder / "special_tokens_map.json").read_text())
    assert roles == {r: str(getattr(run_tokenizer, r)) for r in ROLES if getattr(run_tokenizer, r) is not None}

    # The base's own vocabulary files come along only with the base's vocabulary.
    own = [f for f in VOCABULARY_FILES if (base / f).is_file()]
    if kind == "keep_base":
        assert written["base_vocabulary_files"] == own
        assert all((folder / f).read_bytes() == (base / f).read_bytes() for f in own)
    else:
        assert written["base_vocabulary_files"] == []
        assert not any((folder / f).exists() for f in VOCABULARY_FILES)



@pytest.mark.parametrize("kind", ["keep_base", "inherit"])
def test_the_tokenizer_stage_writes_the_bases_flags(kind, bases, nb_texts, tmp_path):
    """The run's own tokenizer folder (what every later stage and a user reads) keeps them too."""
    from langadapt.data.documents import write_documents
    from langadapt.recipe.tokenizer import TokenizerSlice
    from langadapt.run.context import StageContext
    from langadapt.tokenizer.stage import run

    base = bases("mistral-sp-legacy")  # add_bos_token, add_eos_token and legacy: true
    for split, texts in (("train", nb_texts[:40]), ("valid", nb_texts[40:45])):
        write_documents(tmp_path / "run" / "data" / split / "nb.src.jsonl.gz", (
            {"id": f"{split}-{i}", "text": text, "lang": "nb", "source": "nb.src", "role": "target"}
            for i, (_, text) in enumerate(texts)))
    ctx = StageContext(run_dir=tmp_path / "run", stage="tokenizer", seed=0, base_model=str(base))
    run(TokenizerSlice(TokenizerConfig(kind=kind, vocab_size=1200)), ctx)
    folder = ctx.layout.tokenizer.tokenizer
    config = config_of(folder)
    assert {f: config.get(f) for f in FLAGS} == {f: config_of(base)[f] for f in FLAGS}
    assert json.loads((folder / "special_tokens_map.json").read_text()) == \
        json.loads((base / "special_tokens_map.json").read_text())


def test_a_base_whose_flags_contradict_its_post_processor_is_named(bases, tmp_path, caplog):
    """transformers 5 follows the post-processor, transformers 4 the flags: the run says which it followed."""
    import logging
    import shutil

    from langadapt.tokenizer.stage import load_base_tokenizer

    folder = tmp_path / "base"
    shutil.copytree(bases("mistral-sp-legacy"), folder)
    config = config_of(folder)
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "add_eos_token": True}))
    with caplog.at_level(logging.WARNING, logger="langadapt"):
        base = load_base_tokenizer(str(folder))
    assert "add_eos_token=True, but tokenizer.json's post-processor does not add it" in caplog.text
    assert special_token_flags(base) == {"add_bos_token": True, "add_eos_token": False}
