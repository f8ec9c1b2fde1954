"""The CLI contract: bad input is one clear line on stderr, exit code 2, no traceback, nothing marked complete."""

from __future__ import annotations

import gzip
import json
import subprocess
from functools import partial
from pathlib import Path

import pytest
from helpers.cli import REPO, run_cli

RECIPE = """\
name: cli
run_root: {root}/runs
init: scratch
base_model:
  architecture: {{model_type: llama, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1,
                 num_attention_heads: 2, num_key_value_heads: 1}}
data:
  sources:
    - {{name: nb, path: {corpus}, lang: nb}}
tokenizer:
  kind: byte_bpe
  vocab_size: {vocab}
"""


langadapt = partial(run_cli, timeout=300)


def write_recipe(tmp_path: Path, corpus: str = "{root}/nb.jsonl.gz", vocab: int = 300, extra: str = "") -> Path:
    corpus = corpus.format(root=tmp_path)
    path = tmp_path / "recipe.yaml"
    path.write_text(RECIPE.format(root=tmp_path, corpus=corpus, vocab=vocab) + extra)
    return path


def write_corpus(path: Path, texts: list[str]) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for i, text in enumerate(texts):
            f.write(json.dumps({"id": str(i), "text": text}) + "\n")


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("langadapt: error:")]
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_missing_recipe_file(tmp_path: Path) -> None:
    assert_one_line_error(langadapt("run", str(tmp_path / "nope.yaml")), "nope.yaml: recipe file not found")


def test_malformed_yaml(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\ndata: [\n")
    assert_one_line_error(langadapt("run", str(path)), "bad.yaml:3: malformed YAML")


def test_unknown_key_and_wrong_type(tmp_path: Path) -> None:
    path = write_recipe(tmp_path, extra="stage2:\n  lr_sheduler: cosine\n")
    assert_one_line_error(langadapt("run", str(path), "--dry-run"), "stage2.lr_sheduler: unknown key")
    path = write_recipe(tmp_path)
    assert_one_line_error(langadapt("run", str(path), "--set", "stage2.steps=many"), "stage2.steps", "'many'")


def test_missing_corpus_path(tmp_path: Path) -> None:
    path = write_recipe(tmp_path, corpus="{root}/missing/*.jsonl")
    result = langadapt("run", str(path), "--until", "data")
    assert_one_line_error(result, "nb", "missing")
    assert not (tmp_path / "runs" / "cli" / "data" / "COMPLETE").exists()


def test_empty_corpus(tmp_path: Path) -> None:
    write_corpus(tmp_path / "nb.jsonl.gz", [])
    result = langadapt("run", str(write_recipe(tmp_path)), "--until", "data")
    assert_one_line_error(result, "nb")
    assert not (tmp_path / "runs" / "cli" / "data" / "COMPLETE").exists()


def test_vocab_smaller_than_special_tokens(tmp_path: Path) -> None:
    write_corpus(tmp_path / "nb.jsonl.gz", ["Dette er en setning på norsk."] * 3)
    result = langadapt("run", str(write_recipe(tmp_path, vocab=2)), "--until", "tokenizer")
    assert_one_line_error(result, "vocab_size")
    assert not (tmp_path / "runs" / "cli" / "tokenizer" / "COMPLETE").exists()


def test_dry_run_of_the_demo_recipe_prints_the_stages() -> None:
    result = langadapt("run", "recipes/tiny_norwegian_warm.yaml", "--dry-run")
    assert result.returncode == 0, result.stderr
    # planned from the recipe that builds the base, or from the base once built: the same model, its
    # 4,096-token vocabulary extended to 8,192 (tokenizer.kind extend)
    assert "2.84M parameters" in result.stdout and "vocab 8,192" in result.stdout
    for stage in ("data", "tokenizer", "embeddings", "stage1", "stage2", "evaluate", "export"):
        assert f"  {stage}" in result.stdout


def test_dry_run_lists_the_runs_the_demo_depends_on(tmp_path: Path) -> None:
    """The base model's build (its folder missing here) and the cold twin are runs of their own."""
    build = tmp_path / "english_source.yaml"
    build.write_text((REPO / "recipes/tiny_english_source.yaml").read_text() + f"run_root: {tmp_path}\n")
    base = tmp_path / "tiny_english_source" / "export" / "model"  # where that recipe's export puts it
    result = langadapt("run", "recipes/tiny_norwegian_warm.yaml", "--dry-run", "--json", "--set",
                       f"base_model.path={base}", "--set", f"base_model.build_recipe={build}", "--set", f"run_root={tmp_path}")
    assert json.loads(result.stdout)["depends_on"] == [
        f"base model: {base} is missing; built first by run tiny_english_source ({build})",
        "cold twin: run tiny_norwegian_warm_cold (init: scratch at equal compute), before evaluate",
    ]
    plain = langadapt("run", "recipes/tiny_norwegian_warm.yaml", "--dry-run", "--set", "evaluation.cold_baseline=false")
    assert "cold twin" not in plain.stdout


def test_a_base_path_its_build_recipe_does_not_make_is_refused_before_anything_runs(tmp_path: Path) -> None:
    """`--set base_model.path=` to a missing folder while `build_recipe` still makes the demo's own:
    refused at the key, naming both folders, before the build recipe trains a base that cannot be it."""
    missing = tmp_path / "base"
    for mode in (["--dry-run"], ["--until", "data"]):
        result = langadapt("run", "recipes/tiny_norwegian_warm.yaml", *mode, "--set", f"base_model.path={missing}",
                           "--set", f"run_root={tmp_path}")
        assert_one_line_error(result, f"base_model.path: {missing}: folder not found, and base_model.build_recipe "
                              "recipes/tiny_english_source.yaml makes runs/tiny_english_source/export/model instead")
        assert "run tiny_english_source" not in result.stderr  # the base's own run never started
    assert not [path for path in tmp_path.glob("*/*") if path.is_dir()]  # no stage folder in any run


def test_dry_run_sources_say_the_weight_a_replay_share_gives_them() -> None:
    """The demo states data.replay 0.2: its sources' own `weight 1` is only their part within their role."""
    result = langadapt("run", "recipes/tiny_norwegian_warm.yaml", "--dry-run", "--json", "--set", "stage2.replay=0.35")
    sources = json.loads(result.stdout)["sources"]
    assert sources[0].endswith("(with the replay share: weight 0.8 in stage1, 0.65 in stage2)")
    assert sources[1].endswith("(with the replay share: weight 0.2 in stage1, 0.35 in stage2)")
    assert "replay share" not in sources[2]  # a weight-0 neighbour stays at 0: nothing to say


def test_dry_run_of_the_real_recipe_off_the_cluster_names_the_missing_corpus() -> None:
    """The 7B recipe's corpora live on LUMI's /scratch: a dry run elsewhere is not "valid". It lists
    every problem (the Hub sources and base too where the Hub does not answer); the run stops at the
    first, in one line."""
    line = 1 + next(i for i, text in enumerate((REPO / "recipes" / "norwegian_warm.yaml").read_text().splitlines())
                    if "hplt_v1.2_cleaned/n[bn]_" in text)  # the first source's path: line
    first = f"recipes/norwegian_warm.yaml:{line}: data.sources[0].path"
    dry = langadapt("run", "recipes/norwegian_warm.yaml", "--dry-run")
    errors = [e for e in dry.stderr.splitlines() if e.startswith("langadapt: error:")]
    assert dry.returncode == 2 and first in errors[0] and "matches no file" in errors[0], dry.stderr
    assert "would stop this run" in dry.stderr and "Traceback" not in dry.stderr
    assert_one_line_error(langadapt("run", "recipes/norwegian_warm.yaml"), first, "matches no file")


def test_explain_and_reference_document_every_key() -> None:
    result = langadapt("run", "recipes/tiny_norwegian_warm.yaml", "--explain")
    assert result.returncode == 0, result.stderr
    assert "lr: 0.004  # Peak learning rate" in result.stdout
    reference = langadapt("reference")
    assert "| `stage1.trainable` |" in reference.stdout


@pytest.mark.parametrize("args", [["run"], ["bogus"]])
def test_usage_errors_exit_non_zero(args: list[str]) -> None:
    assert langadapt(*args).returncode != 0


def test_plan_json_of_the_real_recipe() -> None:
    result = langadapt("plan", "recipes/norwegian_warm.yaml", "--json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    stage1, stage2 = plan["stages"]
    assert stage1["trainable"] == "embeddings" and stage2["trainable"] == "all"
    assert stage1["tokens"] == 1000 * 1024 * 4096  # 1,000 steps x 1024 x 4096 (NorMistral stage 1)
    assert stage2["tokens"] == 60000 * 1024 * 4096
    norwegian = [s for s in stage2["mixture"]["sources"] if s["name"] != "code"]
    assert [s["epochs"] for s in norwegian] == pytest.approx([6.0] * 4)
    assert stage2["mixture"]["effective_ratio"] < 1.0
    assert stage1["flops_per_token"] < stage2["flops_per_token"]  # frozen body: ~2/3 of a full step
    assert set(stage2["memory_gb"]) == {"zero0", "zero1", "zero2", "zero3", "fsdp"}
    assert stage2["gpu_hours"] > 0 and stage2["energy_kwh"] > 0 and stage2["zero_stage"] == 2  # the recommendation
    table = langadapt("plan", "recipes/norwegian_warm.yaml")
    assert "ZeRO-3" in table.stdout and "culturax_no" in table.stdout


def test_launch_writes_a_script_that_carries_the_overrides(tmp_path: Path) -> None:
    out = tmp_path / "job.sbatch"
    result = langadapt("launch", "recipes/norwegian_warm.yaml", "--slurm", "--preset", "lumi-g", "--set", "cluster.nodes=3",
                       "--set", "stage2.steps=5000", "--out", str(out))
    assert result.returncode == 0, result.stderr
    script = out.read_text()
    assert "#SBATCH --nodes=3" in script and "--set stage2.steps=5000" in script
    assert subprocess.run(["bash", "-n", str(out)]).returncode == 0


def test_eval_writes_beside_a_model_folder_not_into_it(tmp_path: Path) -> None:
    from langadapt.cli.evaluate import default_eval_out

    model = tmp_path / "my-model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    assert default_eval_out(model) == Path("eval_my-model")  # an HF folder may be uploaded as is
    assert default_eval_out(tmp_path / "runs" / "x") == tmp_path / "runs" / "x" / "eval"
