"""`langadapt eval` on any model folder: --texts LANG=FILE, and an exported folder that finds its run.

The numbers must be the evaluate stage's: an export scored with `--texts` on the run's held-out
file, far from its run, gives the stage's bits per byte (issue 30's goal: to 1e-4), with the
recipe's window rather than the default. Nothing here needs ../shared: a tiny Llama and a byte-level
tokenizer trained on a paragraph.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
from helpers.synthetic import tiny_llama
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from langadapt import cli
from langadapt.data.documents import split_files, write_documents
from langadapt.errors import LangadaptError
from langadapt.evaluation.held_out import read_given_texts, run_of
from langadapt.evaluation.stage import run as evaluate_stage
from langadapt.evaluation.stage_inputs import EvaluateSlice
from langadapt.evaluation.suite import REPO_ROOT
from langadapt.export.provenance import publishable_recipe
from langadapt.recipe import load_recipe
from langadapt.recipe.export import RECIPE_FILE
from langadapt.run.context import StageContext
from langadapt.run.layout import RunLayout

NB = ("Debian er et operativsystem som mange bruker på tjenere. For å installere en ny pakke må du "
      "bruke apt, og pakkene kommer fra et arkiv som speiles over hele verden. ")
NN = "GIMP er eit program som kan opne bilete. For å opne eit bilete må du velje Fil og så Opne. "
WINDOW = 48  # the recipe's evaluation.window: not the default 512, so the settings must come from it


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Two OpenMP threads on a shared 2-core box spin against each other; one is faster here."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A run as the pipeline leaves it: resolved recipe, held-out data, stage 2's model, the
    evaluate stage's results, and the export folder with its published recipe."""
    root = tmp_path_factory.mktemp("work")
    recipe = load_recipe(str(REPO_ROOT / "recipes" / "tiny_norwegian_warm.yaml"), [
        f"run_root={root / 'runs'}", "name=demo", f"evaluation.window={WINDOW}",
        "evaluation.max_bytes_per_lang=2000", "evaluation.random_baseline=false",
        "evaluation.generate.max_new_tokens=3"])
    layout = RunLayout(recipe.recipe.run_dir)
    layout.root.mkdir(parents=True)
    # as `langadapt run` would write it with run_root: runs (relative to where it was started)
    layout.resolved_recipe.write_text(recipe.resolved_yaml().replace(str(root / "runs"), "runs"), "utf-8")
    for lang, text, n in (("nb", NB, 6), ("nn", NN, 4)):
        docs = ({"id": f"{lang}{i}", "text": f"{i}. {text * (i + 1)}", "lang": lang, "source": lang,
                 "role": "target"} for i in range(n))
        write_documents(layout.data.valid / f"{lang}.jsonl.gz", docs)
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.train_from_iterator([NB, NN] * 5, trainers.BpeTrainer(
        vocab_size=320, special_tokens=["</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="</s>")
    model = layout.trained("stage2").model
    tiny_llama(len(tok), seed=3).save_pretrained(model)
    tok.save_pretrained(model)
    ctx = StageContext(run_dir=layout.root, stage="evaluate", seed=0, log=logging.getLogger("test"))
    ctx.out.mkdir()
    evaluate_stage(EvaluateSlice(recipe.recipe.evaluation.model_copy(update={"suites": [str(_suite(root))]})), ctx)
    shutil.copytree(model, layout.export.model)
    (layout.export.model / RECIPE_FILE).write_text(publishable_recipe(layout.resolved_recipe.read_text()), "utf-8")
    return layout.root


def _suite(root: Path) -> Path:
    path = root / "suite.yaml"
    path.write_text("name: local\ntasks:\n  - {kind: bpb, langs: [nb, nn]}\n  - {kind: tokenizer_metrics, langs: [nb, nn]}\n"
                    "  - {kind: generate, prompts: {nb: [Debian er]}}\n", "utf-8")
    return path


def _stage_bpb(run_dir: Path) -> dict[str, float]:
    results = json.loads(RunLayout(run_dir).evaluation_results.read_text("utf-8"))
    return {lang: m["bits_per_byte"] for lang, m in results["models"]["adapted"].items()}


def _eval(argv: list[str], capsys) -> dict:
    assert cli.main(["eval", *argv, "--overwrite"]) == 0, capsys.readouterr().err
    out = Path(argv[argv.index("--out") + 1])
    return json.loads((out / "results.json").read_text("utf-8"))


def _valid_file(run_dir: Path, lang: str) -> Path:
    return next(p for p in split_files(RunLayout(run_dir).data.root, "valid") if p.name.startswith(lang))


def test_an_export_far_from_its_run_with_texts_gives_the_stages_bits_per_byte(run_dir, tmp_path, monkeypatch, capsys):
    """The goal of issue 30: the same number as the run's evaluate stage, to 1e-4, with the window
    of the recipe exported beside the weights (the run itself is not reachable from here)."""
    far = tmp_path / "elsewhere" / "model"
    shutil.copytree(RunLayout(run_dir).export.model, far)
    monkeypatch.chdir(tmp_path)  # runs/demo is not here: only --texts can give held-out text
    assert run_of(far) is None
    results = _eval([str(far), "--suite", str(_suite(tmp_path)), "--out", str(tmp_path / "out"),
                     "--texts", f"nb={_valid_file(run_dir, 'nb')}"], capsys)
    bpb = results["models"]["model"]["nb"]["bits_per_byte"]
    assert bpb == pytest.approx(_stage_bpb(run_dir)["nb"], abs=1e-4)
    assert results["meta"]["window"] == WINDOW and results["meta"]["max_bytes_per_lang"] == 2000
    assert results["langs"]["nb"]["source"] == "nb.jsonl.gz" and results["target_langs"] == ["nb"]
    # the recipe's 2,000-byte cap cut the file: said in a note (and the results), and on the console
    given = sum(len(d.encode()) for d in read_given_texts([f"nb={_valid_file(run_dir, 'nb')}"]).texts["nb"])
    assert results["langs"]["nb"]["bytes"] == 2000 and results["langs"]["nb"]["bytes_given"] == given > 2000
    cap = next(n for n in results["notes"] if n.startswith("--texts nb: scored 2,000 of"))
    assert "evaluation.max_bytes_per_lang is 2,000" in cap and "--max-bytes all" in cap
    # nn had no text: one note, saying where the run is and what to pass
    (note,) = [n for n in results["notes"] if n != cap]
    assert "no held-out text for 'nn'" in note and "--texts LANG=FILE" in note
    assert "run demo (run_root runs)" in note
    # every text scored came from a file: no run directory is named as its source
    out = capsys.readouterr().out
    assert "held_out_run" not in results and "held-out text: the valid split" not in out
    assert f"held-out text nb: scored {results['langs']['nb']['documents']:,} of 6 documents, 2,000 of {given:,} bytes" in out


def test_an_export_finds_its_runs_held_out_data_by_itself(run_dir, tmp_path, monkeypatch, capsys):
    """Inside RUN/export/, and copied elsewhere while its recipe's run_root/name is reachable."""
    stage = _stage_bpb(run_dir)
    inside = _eval([str(RunLayout(run_dir).export.model), "--suite", str(_suite(tmp_path)),
                    "--out", str(tmp_path / "inside")], capsys)
    assert inside["models"]["demo/export"]["nb"]["bits_per_byte"] == pytest.approx(stage["nb"], abs=1e-4)
    assert inside["models"]["demo/export"]["nn"]["bits_per_byte"] == pytest.approx(stage["nn"], abs=1e-4)
    assert inside["notes"] == [] and inside["langs"]["nn"]["source"] == "run data (valid)"
    assert Path(inside["held_out_run"]).resolve() == run_dir.resolve()  # which run's valid split, said
    assert f"held-out text: the valid split of {inside['held_out_run']}" in capsys.readouterr().out

    copy = tmp_path / "copy"
    shutil.copytree(RunLayout(run_dir).export.model, copy)
    monkeypatch.chdir(run_dir.parent.parent)  # where `langadapt run` ran: runs/demo resolves
    assert run_of(copy) == Path("runs") / "demo"
    found = _eval([str(copy), "--suite", str(_suite(tmp_path)), "--out", str(tmp_path / "copied")], capsys)
    assert found["models"]["copy"]["nn"]["bits_per_byte"] == pytest.approx(stage["nn"], abs=1e-4)


def test_texts_replace_the_runs_text_for_their_language_only(run_dir, tmp_path, capsys):
    """A language given with --texts is scored on that file (even one no suite names); the others
    keep the run's held-out data."""
    own = tmp_path / "sv.txt"
    own.write_text("Det här är en svensk text om Debian.\n\nEn andra mening om paket.\n", "utf-8")
    results = _eval([str(RunLayout(run_dir).export.model), "--suite", str(_suite(tmp_path)), "--out",
                     str(tmp_path / "out"), "--texts", f"nb={own}", "--texts", f"sv={own}"], capsys)
    scored = results["models"]["demo/export"]
    assert set(scored) == {"nb", "nn", "sv"}
    assert scored["nb"]["bits_per_byte"] == pytest.approx(scored["sv"]["bits_per_byte"], abs=1e-9)
    assert scored["nb"]["bytes"] == len(own.read_text("utf-8").encode()) - 1  # two paragraphs, one blank line
    assert results["langs"]["nn"]["source"] == "run data (valid)" and results["langs"]["sv"]["source"] == "sv.txt"


def test_texts_read_through_the_data_readers_formats_and_refuse_bad_input(tmp_path):
    """txt (a paragraph a document) and jsonl, plain, .gz and .zst, as the data stage reads them."""
    import gzip

    import zstandard

    lines = "".join(json.dumps({"text": t}) + "\n" for t in ("én", "to"))
    (tmp_path / "a.jsonl.zst").write_bytes(zstandard.ZstdCompressor(write_checksum=True).compress(lines.encode()))
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress(lines.encode()))
    (tmp_path / "c.txt").write_text("første\n\nandre\n", "utf-8")
    given = read_given_texts([f"nb={tmp_path / 'a.jsonl.zst'}", f"nb={tmp_path / 'b.jsonl.gz'}", f"nn={tmp_path / 'c.txt'}"])
    assert given.texts == {"nb": ["én", "to", "én", "to"], "nn": ["første\n", "andre\n"]}
    assert given.sources == {"nb": "a.jsonl.zst, b.jsonl.gz", "nn": "c.txt"}
    (tmp_path / "bad.jsonl").write_text('{"text": "a"}\n{oops\n', "utf-8")
    (tmp_path / "x.bin").write_text("x", "utf-8")
    for entry, message in ((f"{tmp_path / 'c.txt'}", "expected LANG=FILE"), ("nb=", "expected LANG=FILE"),
                           (f"nb={tmp_path / 'none.txt'}", "none.txt"),
                           (f"nb={tmp_path / 'bad.jsonl'}", r"^--texts nb: invalid JSON at line 2 of .*bad\.jsonl"),
                           (f"nb={tmp_path / 'x.bin'}", "cannot tell the format")):
        with pytest.raises(LangadaptError, match=message):
            read_given_texts([entry])


def test_a_plain_folder_without_texts_gets_one_note(run_dir, tmp_path, capsys):
    """Not exported by langadapt, no run: one note for every language, naming --texts."""
    plain = tmp_path / "plain"
    shutil.copytree(RunLayout(run_dir).export.model, plain, ignore=shutil.ignore_patterns(RECIPE_FILE))
    results = _eval([str(plain), "--suite", str(_suite(tmp_path)), "--out", str(tmp_path / "out")], capsys)
    assert results["models"]["plain"] == {} and results["meta"]["window"] == 512  # the defaults: no recipe
    (note,) = results["notes"]
    assert "no held-out text for 'nb', 'nn' here" in note and "carries no held-out data" in note
    assert "local/bpb, local/tokenizer_metrics: no" in note and "--texts LANG=FILE" in note


def test_max_bytes_and_text_field_flags(run_dir, tmp_path, capsys):
    """Issue 38: `--max-bytes all` scores every byte of a --texts file the recipe's cap would cut
    (no note then), `--max-bytes N` sets the cap, and `--text-field` reads another field."""
    docs = [f"{i}. {NB * 3}" for i in range(8)]
    own = tmp_path / "own.jsonl"
    own.write_text("".join(json.dumps({"body": d}, ensure_ascii=False) + "\n" for d in docs), "utf-8")
    whole = sum(len(d.encode()) for d in docs)
    base = [str(RunLayout(run_dir).export.model), "--suite", str(_suite(tmp_path)), "--texts", f"nb={own}",
            "--text-field", "body"]
    results = _eval([*base, "--out", str(tmp_path / "all"), "--max-bytes", "all"], capsys)
    assert results["langs"]["nb"] == {"documents": 8, "bytes": whole, "source": "own.jsonl"}
    assert results["meta"]["max_bytes_per_lang"] is None
    assert not any(n.startswith("--texts") for n in results["notes"])
    results = _eval([*base, "--out", str(tmp_path / "cut"), "--max-bytes", "1,000"], capsys)
    assert results["langs"]["nb"]["bytes"] == 1000 and results["langs"]["nb"]["documents_given"] == 8
    with pytest.raises(SystemExit) as exit_:
        cli.main(["eval", *base, "--out", str(tmp_path / "x"), "--max-bytes", "0"])
    assert exit_.value.code == 2 and "--max-bytes: '0': expected a positive number of bytes or `all`" in capsys.readouterr().err
    with pytest.raises(LangadaptError, match="has no 'text' field|'text'"):  # the default field is text
        read_given_texts([f"nb={own}"])
