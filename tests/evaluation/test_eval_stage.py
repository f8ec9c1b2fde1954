"""The evaluate stage on a small real run directory: models found, report written, stable schema."""

from __future__ import annotations

import json
import logging
import math
import unicodedata
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from langadapt.data.documents import write_documents
from langadapt.evaluation import EvaluationConfig, evaluate_cli, tables
from langadapt.evaluation.render import visible
from langadapt.evaluation.stage import run
from langadapt.evaluation.stage_inputs import EvaluateSlice
from langadapt.run.context import StageContext

BPB_KEYS = {"bits_per_byte", "nll_nats", "bytes", "tokens", "words", "word_perplexity", "tokens_per_second"}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Two OpenMP threads on a shared 2-core box spin against each other; one is faster here."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _save(model, tokenizer, path: Path) -> None:
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tiny_en_llama, shared_texts) -> Path:
    """A run directory as the pipeline leaves it: data/valid, a new tokenizer's warm model, two stages.

    stage2 gets a few real gradient steps on Bokmål, so its nb bpb must drop below init's.
    """
    from langadapt.embeddings import EmbeddingConfig, transfer_embeddings

    root = tmp_path_factory.mktemp("run") / "demo"
    valid = {
        "nb": shared_texts("nb.debian-handbook.valid", 2),
        "nn": shared_texts("nn.gimp-help.valid", 2),
        "en": shared_texts("en.gimp-help.valid", 3),
    }
    for lang, texts in valid.items():
        docs = (
            {"id": f"{lang}{i}", "text": t, "lang": lang, "source": lang, "role": "target"}
            for i, t in enumerate(texts)
        )
        write_documents(root / "data" / "valid" / f"{lang}.jsonl.gz", docs)
    old = AutoTokenizer.from_pretrained(tiny_en_llama)
    train = shared_texts("nb.debian-handbook.train", 15)
    new = old.train_new_from_iterator(train, vocab_size=1500)
    model = AutoModelForCausalLM.from_pretrained(tiny_en_llama)
    model, _ = transfer_embeddings(model, old, new, EmbeddingConfig(method="mean"), seed=0)
    _save(model, new, root / "embeddings" / "model")
    _save(model, new, root / "stage1" / "model")
    _train_a_little(model, new, train)
    _save(model, new, root / "stage2" / "model")
    (root / "embeddings" / "manifest.json").write_text(
        json.dumps({"base_model": str(tiny_en_llama)}), "utf-8"
    )
    # the tokenizer stage's record (bytes per token as it measured them; the report inverts them)
    (root / "tokenizer").mkdir()
    (root / "tokenizer" / "manifest.json").write_text(json.dumps({"summary": {"kind": "inherit"}}), "utf-8")
    (root / "tokenizer" / "metrics.json").write_text(json.dumps({"languages": ["en", "nb"], "tokenizers": {
        "base": {"nb": {"bytes_per_token": 2.5}, "en": {"bytes_per_token": 4.0}},
        "new": {"nb": {"bytes_per_token": 4.0}, "en": {"bytes_per_token": 3.2}}}}), "utf-8")
    for stage, n in (("stage1", 3), ("stage2", 4)):
        rows = [{"step": 10 * (i + 1), "loss": 6.0 - i, "lr": 1e-3, "tokens": 1000 * i} for i in range(n)]
        (root / stage / "metrics.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows) + '{"step": 9', "utf-8"
        )
    return root


def _train_a_little(
    model, tokenizer, texts: list[str], steps: int = 8, rows: int = 4, width: int = 97
) -> None:
    """A few AdamW steps on fresh Bokmål batches (enough to lower held-out nb bpb clearly)."""
    ids = tokenizer("\n".join(texts), add_special_tokens=False)["input_ids"]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    for step in range(steps):
        batch = torch.tensor(ids[step * rows * width : (step + 1) * rows * width]).view(rows, width)
        model(input_ids=batch, labels=batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()


@pytest.fixture(scope="module")
def stage_results(run_dir, tiny_en_llama) -> tuple[dict, dict]:
    config = EvaluationConfig(max_bytes_per_lang=1500, window=128, generate={"max_new_tokens": 6})
    ctx = StageContext(
        run_dir=run_dir,
        stage="evaluate",
        seed=0,
        base_model=str(tiny_en_llama),
        log=logging.getLogger("test"),
    )
    ctx.out.mkdir(exist_ok=True)
    summary = run(EvaluateSlice(config), ctx)
    return summary, json.loads((ctx.out / "results.json").read_text("utf-8"))


def test_stage_scores_every_model_of_the_run(stage_results):
    summary, results = stage_results
    assert list(results["models"]) == ["base", "init", "init_random", "stage1", "adapted"]
    for name, per_lang in results["models"].items():
        assert set(per_lang) == {"nb", "nn", "en"}, name
        for metrics in per_lang.values():
            assert (
                BPB_KEYS <= set(metrics)
                and math.isfinite(metrics["bits_per_byte"])
                and metrics["bits_per_byte"] > 0
            )
    assert summary["bits_per_byte"]["base"]["nb"] == pytest.approx(
        results["models"]["base"]["nb"]["bits_per_byte"], abs=1e-4
    )
    # the demo's claims, on a tiny scale: the mean init beats random rows, training helps further
    nb = {name: results["models"][name]["nb"]["bits_per_byte"] for name in results["models"]}
    assert nb["init"] < nb["init_random"]
    assert nb["adapted"] < nb["init"]


def test_results_schema_deltas_tasks_tokenizers_samples(stage_results):
    _, results = stage_results
    assert results["reference"] == "base"
    for name in ("init", "init_random", "stage1", "adapted"):
        for lang, delta in results["deltas"][name].items():
            expected = (
                results["models"][name][lang]["bits_per_byte"]
                - results["models"]["base"][lang]["bits_per_byte"]
            )
            assert delta["bits_per_byte"] == pytest.approx(expected)
    pairs = results["tasks"]["monolingual/nb_minimal_pairs"]
    assert pairs["kind"] == "minimal_pairs" and pairs["lang"] == "nb"
    assert pairs["base"]["pairs"] == 24 and 0 <= pairs["adapted"]["accuracy"] <= 1
    assert set(results["task_deltas"]["monolingual/nb_minimal_pairs"]["adapted"]) == {
        "accuracy",
        "mean_margin_nats",
    }
    assert results["tokenizers"]["used_by"] == {
        "base": ["base"],
        "new": ["init", "init_random", "stage1", "adapted"],
    }
    fertility = results["tokenizers"]["metrics"]["tokenizers"]
    assert fertility["new"]["nb"]["fertility"] < fertility["base"]["nb"]["fertility"]
    assert set(results["samples"]["adapted"]) == {"nb", "nn", "en", "sv", "da", "fi", "code"}
    assert results["samples"]["base"]["nb"][0]["text"].startswith("Debian er et operativsystem som")
    assert any("'sv'" in note for note in results["notes"])  # no Swedish held-out text in this run
    assert results["langs"]["nb"]["bytes"] == 1500


def test_the_targets_tokens_per_byte_from_the_tokenizer_stage(stage_results, run_dir):
    """What a target token costs sits in results.json and under the report's first table (issue 29)."""
    _, results = stage_results
    assert results["tokens_per_byte"] == {"run": {"en": 0.3125, "nb": 0.25}, "base": {"en": 0.25, "nb": 0.4}}
    markdown = (run_dir / "evaluate" / "report.md").read_text("utf-8")
    assert "with the run's tokenizer (what a token costs at inference: lower is cheaper): nb 0.250 " \
           "(base tokenizer 0.400)." in markdown


def test_report_files_are_written_and_self_contained(run_dir, stage_results):  # the stage wrote them
    out = run_dir / "evaluate"
    for name in (
        "results.json",
        "report.md",
        "report.html",
        "plots/bpb.png",
        "plots/deltas.png",
        "plots/fertility.png",
        "plots/training.png",
    ):
        assert (out / name).is_file(), name
    html = (out / "report.html").read_text("utf-8")
    assert html.count("data:image/png;base64,") == 4 and 'src="plots/' not in html
    markdown = (out / "report.md").read_text("utf-8")
    assert "## What changed: adapted vs base" in markdown and "![" in markdown
    assert "| nb | monolingual |" in markdown
    assert "### Scoring throughput" in markdown and "| base |" in markdown
    assert not [c for c in markdown if unicodedata.category(c) == "Cc" and c != "\n"]  # samples made visible


def test_throughput_table_pools_languages_and_samples_are_printable():
    results = {"models": {"base": {"nb": {"tokens": 1000, "tokens_per_second": 500.0},
                                   "en": {"tokens": 3000, "tokens_per_second": 1500.0}}}}
    header, rows = tables.throughput_rows(results)
    assert header[-1] == "tokens/s" and rows == [["base", "4,000", "4.0", "1,000"]]
    assert visible("a\x00b\nc\td") == "a\\x00b ↵ c d"


def test_evaluate_cli_on_a_model_folder_with_explicit_files(run_dir, tmp_path):
    """`langadapt eval FOLDER`: no run data, so a suite naming local files; compare adds a run."""
    text = tmp_path / "nb.txt"
    text.write_text("Dette er en kort tekst på norsk bokmål om Debian og pakker.", "utf-8")
    suite = tmp_path / "local.yaml"
    suite.write_text(f"name: local\ntasks:\n  - {{kind: bpb, files: {{nb_local: [{text}]}}}}\n", "utf-8")
    results = evaluate_cli(str(run_dir / "stage2" / "model"), [str(suite)], tmp_path / "out", [])
    assert list(results["models"]) == ["demo/stage2"]  # the run and stage it came from, not "model"
    assert "nb_local" in results["models"]["demo/stage2"]
    assert (tmp_path / "out" / "report.html").is_file()


def test_evaluate_cli_on_a_run_directory_finds_base_and_compares(run_dir, tmp_path, tiny_en_llama):
    """Outside the pipeline the base model comes from the run's manifests; compare adds a folder."""
    suite = tmp_path / "nb.yaml"
    suite.write_text("name: nb\ntasks:\n  - {kind: bpb, langs: [nb]}\n", "utf-8")
    config = EvaluationConfig(max_bytes_per_lang=600, window=128, random_baseline=False)
    results = evaluate_cli(str(run_dir), [str(suite)], tmp_path / "out", [str(tiny_en_llama)], config=config)
    assert list(results["models"]) == ["base", "init", "stage1", "adapted", "tiny-en-llama"]
    base, again = results["models"]["base"]["nb"], results["models"]["tiny-en-llama"]["nb"]
    assert base["bits_per_byte"] == pytest.approx(again["bits_per_byte"], abs=1e-6)
    assert (tmp_path / "out" / "plots" / "training.png").is_file()
    assert results["tokens_per_byte"]["run"]["nb"] == 0.25  # the run's tokenizer stage, as in its pipeline
