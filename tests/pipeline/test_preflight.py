"""Validation before work: through the real CLI, each bad input is one line naming the recipe
file and key, exit 2, before any stage runs (no stage folder, nothing marked COMPLETE).

Before the preflight check these failed after data and tokenizer ran (missing config.json),
after stage 1 and 2 (missing suite), at the start of stage 2 (epochs), or never (seq_len beyond
the model's positions, a 10M vocabulary, a typo in a mixture).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.cli import run_cli

from langadapt.data.epochs import stage_plan
from langadapt.errors import LangadaptError
from langadapt.planning.recipe_plan import plan_recipe
from langadapt.recipe import load_recipe
from langadapt.recipe.data import DataConfig

WARM = """\
name: pf
run_root: {root}/runs
base_model:
  path: {base}
data:
  sources:
    - {{name: nb, path: {corpus}, lang: nb}}
tokenizer:
  vocab_size: 1000
evaluation:
  suites: [eval/monolingual.yaml]
stage1:
  steps: 2
  seq_len: 64
"""


langadapt = run_cli


def assert_refused(result: subprocess.CompletedProcess, root: Path, *fragments: str) -> str:
    """One `langadapt: error:` line with every fragment, exit 2, no traceback, no stage touched."""
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("langadapt: error:")]
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert not list((root / "runs").glob("*/*/COMPLETE")), "a stage ran before the check"
    return lines[0]


@pytest.fixture()
def warm(tmp_path: Path, tiny_en_llama: Path, shared_dir: Path):
    """write(extra_yaml, base=..., corpus=...) -> recipe path of a warm recipe on tiny-en-llama."""

    def write(extra: str = "", base: Path | str = tiny_en_llama,
              corpus: str = str(shared_dir / "corpora" / "nb.debian-handbook.train.jsonl.gz")) -> Path:
        path = tmp_path / "recipe.yaml"
        path.write_text(WARM.format(root=tmp_path, base=base, corpus=corpus) + extra)
        return path

    return write


def test_a_valid_recipe_passes_the_dry_run(warm, tmp_path: Path) -> None:
    result = langadapt("run", str(warm()), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "valid" in result.stdout


def test_missing_corpus_glob(warm, tmp_path: Path) -> None:
    result = langadapt("run", str(warm(corpus=f"{tmp_path}/nb/*.jsonl")))
    assert_refused(result, tmp_path, "recipe.yaml:7: data.sources[0].path", "matches no file")


def test_missing_base_model_folder_fails_the_dry_run(warm, tmp_path: Path) -> None:
    result = langadapt("run", str(warm(base=tmp_path / "nope")), "--dry-run")
    assert_refused(result, tmp_path, "recipe.yaml:4: base_model.path", "not found")


def test_a_base_model_path_that_is_a_file_is_named_as_such(warm, tmp_path: Path, tiny_en_llama: Path) -> None:
    """Pointing at config.json or the weights instead of their folder is a common slip: "not found" misled."""
    result = langadapt("run", str(warm(base=tiny_en_llama / "config.json")), "--dry-run")
    assert_refused(result, tmp_path, "recipe.yaml:4: base_model.path", "config.json is a file, not a model folder")


def test_base_folder_without_config_json(warm, tmp_path: Path, tiny_en_llama: Path) -> None:
    base = tmp_path / "base"
    shutil.copytree(tiny_en_llama, base)
    (base / "config.json").unlink()
    assert_refused(langadapt("run", str(warm(base=base))), tmp_path, "base_model.path", "has no config.json")


def test_base_folder_without_tokenizer_files(warm, tmp_path: Path, tiny_en_llama: Path) -> None:
    base = tmp_path / "base"
    shutil.copytree(tiny_en_llama, base)
    (base / "tokenizer.json").unlink()
    line = assert_refused(langadapt("run", str(warm(base=base))), tmp_path, "base_model.path", "no tokenizer files")
    assert "sentencepiece" not in line


def test_seq_len_beyond_the_models_positions(warm, tmp_path: Path) -> None:
    result = langadapt("run", str(warm()), "--set", "stage1.seq_len=4096")
    assert_refused(result, tmp_path, "--set stage1.seq_len=4096: stage1.seq_len: 4096 is more than the model's "
                   "max_position_embeddings 512")


def test_stage2_seq_len_inherited_from_stage1_is_blamed_on_stage1(warm, tmp_path: Path) -> None:
    recipe = warm()
    recipe.write_text(recipe.read_text().replace("seq_len: 64", "seq_len: 1024"))
    result = langadapt("run", str(recipe))
    assert_refused(result, tmp_path, "recipe.yaml:14: stage1.seq_len: 1024", "(and 1 more: stage2.seq_len (inherited")


def test_dry_run_prints_the_plan_and_every_problem_at_once(warm, tmp_path: Path) -> None:
    """A run stops at the first problem; --dry-run lists them all (one line each, file:line) after
    the plan, exits 2, and --json carries the same list for tools."""
    recipe = warm()
    recipe.write_text(recipe.read_text().replace("seq_len: 64", "seq_len: 1024"))
    args = ("run", str(recipe), "--set", "evaluation.suites=[nope.yaml]", "--dry-run")
    result = langadapt(*args)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("langadapt: error:")]
    assert len(errors) == 3, result.stderr
    assert "recipe.yaml:14: stage1.seq_len: 1024" in errors[0]
    assert "stage2.seq_len (inherited from stage1.seq_len)" in errors[1]
    assert "evaluation.suites[0]" in errors[2] and "nope.yaml" in errors[2]
    assert "3 problem(s) would stop this run" in result.stderr
    assert "GPU-h" in result.stdout and "  stage2" in result.stdout  # the plan and the stage actions
    assert not (tmp_path / "runs").exists()
    as_json = json.loads(langadapt(*args, "--json").stdout)
    assert as_json["valid"] is False and as_json["problems"] == [e.removeprefix("langadapt: error: ") for e in errors]
    assert as_json["plan"]["stages"][0]["name"] == "stage1"


@pytest.mark.parametrize("vocab, fragment", [
    (2, "is too small for byte_bpe"),
    (4_000_000, "more than a BPE vocabulary can have on this corpus"),
])
def test_vocab_size_against_specials_and_corpus(warm, tmp_path: Path, vocab: int, fragment: str) -> None:
    result = langadapt("run", str(warm()), "--set", f"tokenizer.vocab_size={vocab}", "--dry-run")
    assert_refused(result, tmp_path, f"--set tokenizer.vocab_size={vocab}: tokenizer.vocab_size", fragment)


def test_missing_suite_fails_before_any_stage(warm, tmp_path: Path) -> None:
    result = langadapt("run", str(warm()), "--set", "evaluation.suites=[eval/nope.yaml]")
    assert_refused(result, tmp_path, "evaluation.suites[0]", "nope.yaml: suite file not found")


def test_unknown_task_kind_in_a_suite(warm, tmp_path: Path) -> None:
    suite = tmp_path / "suite.yaml"
    suite.write_text("name: s\ntasks:\n  - {kind: bpbb, langs: [nb]}\n")
    result = langadapt("run", str(warm()), "--set", f"evaluation.suites=[{suite}]", "--dry-run")
    assert_refused(result, tmp_path, "evaluation.suites[0]", "unknown task kind 'bpbb'")


def test_mixture_typo_and_unknown_source(warm, tmp_path: Path) -> None:
    typo = langadapt("run", str(warm("  mixture: {nb: {wieght: 0.5}}\n")), "--dry-run")
    assert_refused(typo, tmp_path, "stage1.mixture.nb.wieght: unknown key; did you mean weight?")
    unknown = langadapt("run", str(warm("  mixture: {nbb: {weight: 0.5}}\n")), "--dry-run")
    assert_refused(unknown, tmp_path, "stage1.mixture: unknown source 'nbb'; did you mean nb?")


def test_epochs_above_the_cap_fail_before_training_and_name_the_same_source_as_plan(warm, tmp_path: Path) -> None:
    recipe = warm("  micro_batch_size: 1000\n")  # 2 x 1000 x 64 tokens over 5,000 declared: 25 epochs
    recipe.write_text(recipe.read_text().replace("lang: nb}", "lang: nb, unique_tokens: 5000}"))
    line = assert_refused(langadapt("run", str(recipe)), tmp_path, "stage1.steps", "source nb", "epochs is above 16")
    with pytest.raises(LangadaptError) as planned:
        plan_recipe(load_recipe(recipe).recipe, num_gpus=1)
    assert str(planned.value) in line
    forced = langadapt("run", str(recipe), "--set", "data.force_epochs=true", "--dry-run")
    assert forced.returncode == 0, forced.stderr


def test_plan_and_training_count_epochs_alike() -> None:
    """Training counts whole seq_len chunks; plan used to count raw tokens: the same function now."""
    mixture = {"b": {"weight": 1.0}, "a": {"weight": 1.0}}
    plan = stage_plan(mixture, {"a": 1000, "b": 1000}, seq_len=100, samples=320, force=True)
    assert [s.name for s in plan.sources] == ["a", "b"]
    assert plan.source("a").unique_tokens == 900  # (1000 - 1) // 100 chunks of 100 tokens
    with pytest.raises(LangadaptError, match="source a: 17.8 epochs"):
        stage_plan(mixture, {"a": 1000, "b": 1000}, seq_len=100, samples=320, force=False)


def test_data_config_mixture_entries_are_typed() -> None:
    from langadapt.recipe.data import stream_mixture
    from langadapt.recipe.train import TrainStageConfig

    data = DataConfig(sources=[{"name": "nb", "path": "x", "lang": "nb"}, {"name": "en", "path": "y", "lang": "en"}])
    stage = TrainStageConfig(mixture={"en": {"epochs": 2}})
    assert stream_mixture(data, stage.mixture) == {"nb": {"weight": 1.0}, "en": {"epochs": 2.0}}


def test_a_malformed_minimal_pairs_file_is_refused_before_training(warm, tmp_path: Path) -> None:
    """The suite's data file used to be read only by the evaluate stage: a bad row stopped a run after training."""
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text('{"good": "Jeg er her.", "bad": "Jeg er her her."}\n{"good": "Hun leser."}\n')
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"tasks:\n  - {{kind: minimal_pairs, lang: nb, path: {pairs}}}\n")
    result = langadapt("run", str(warm()), "--set", f"evaluation.suites=[{suite}]")
    assert_refused(result, tmp_path, "evaluation.suites[0]", "pairs.jsonl:2", "key(s) bad")


@pytest.mark.parametrize(("rows", "directions", "shots", "fragments"), [
    (['{"nb": "Hei.", "en": "Hi."}', '{"nb": "Takk."}'], "[nb-en]", 0, ("pairs.jsonl:2", "key(s) en")),
    (['{"nb": "Hei.", "en": "Hi."}'], "[nb-de]", 0, ("pairs.jsonl:1", "key(s) de")),
    (['{"nb": "Hei.", "en": "Hi."}', '{"nb": "Takk.", "en": "Thanks."}'], "[nb-en]", 2,
     ("has 2 pair(s), none left to score after num_fewshot=2",)),
    (['{"nb": "Hei.", "en": ""}'], "[nb-en]", 0, ("pairs.jsonl:1", "en is empty")),
    (['{"nb": "' + "ord " * 6000 + '", "en": "Hi."}'], "[nb-en]", 0, ("pairs.jsonl:1", "24,000 characters")),
], ids=["missing-side", "language-not-in-file", "fewshot-takes-all", "empty-side", "one-huge-row"])
def test_a_bad_translation_file_is_refused_before_training(warm, tmp_path: Path, rows: list[str], directions: str,
                                                          shots: int, fragments: tuple[str, ...]) -> None:
    """Translation pairs were read after torch loaded, in the evaluate stage: now at preflight, as minimal pairs are."""
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("\n".join(rows) + "\n", encoding="utf-8")
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"tasks:\n  - {{kind: translation, name: tr, path: {pairs}, directions: {directions}, "
                     f"num_fewshot: {shots}}}\n")
    result = langadapt("run", str(warm()), "--set", f"evaluation.suites=[{suite}]")
    assert_refused(result, tmp_path, "evaluation.suites[0]", *fragments)


def test_a_latin1_translation_file_names_its_line_and_byte(warm, tmp_path: Path) -> None:
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_bytes('{"nb": "Hei.", "en": "Hi."}\n{"nb": "Blåbær.", "en": "Blueberries."}\n'.encode("latin-1"))
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"tasks:\n  - {{kind: translation, name: tr, path: {pairs}, directions: [nb-en], num_fewshot: 0}}\n")
    result = langadapt("run", str(warm()), "--set", f"evaluation.suites=[{suite}]")
    assert_refused(result, tmp_path, "pairs.jsonl:2: invalid UTF-8 at byte 10", "save the file as UTF-8")


def test_a_stage_that_is_all_warm_up_is_said(warm, tmp_path: Path) -> None:
    """20 steps with 20 warm-up steps never train at the peak LR: legal, but said at preflight."""
    result = langadapt("run", str(warm()), "--set", "stage2.steps=20", "--set", "stage2.schedule.warmup_steps=20",
                       "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "stage2: schedule.warmup_steps 20 covers all 20 steps" in result.stderr
    fine = langadapt("run", str(warm()), "--set", "stage2.steps=20", "--set", "stage2.schedule.warmup_steps=5", "--dry-run")
    assert fine.returncode == 0 and "covers all" not in fine.stderr, fine.stderr


def tied_base(tmp_path: Path, tiny_en_llama: Path):
    """A one-layer Llama with tied embeddings and tiny-en-llama's tokenizer, saved as a base model
    folder: (its folder, its config)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tied = tmp_path / "tied"
    config = LlamaConfig(vocab_size=8192, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(tied)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_en_llama / name, tied / name)
    return tied, config


def test_a_separate_head_init_on_a_tied_base_is_refused_before_any_stage(warm, tmp_path: Path,
                                                                         tiny_en_llama: Path) -> None:
    """A tied base has one matrix; head_init other than same was refused only in the embeddings
    stage, after data and tokenizer had run."""
    tied, config = tied_base(tmp_path, tiny_en_llama)
    result = langadapt("run", str(warm(base=tied)), "--set", "embeddings.head_init=mean_of_base_head")
    assert_refused(result, tmp_path, "embeddings.head_init", "mean_of_base_head: the base ties its LM head")
    assert langadapt("run", str(warm()), "--set", "embeddings.head_init=mean_of_base_head",
                     "--dry-run").returncode == 0  # tiny-en-llama is untied


def test_preflight_and_the_transfer_refuse_a_tied_head_init_with_one_check(warm, tmp_path: Path,
                                                                            tiny_en_llama: Path) -> None:
    """One `head_init_problem` (review s19 D3): the dry run's line and the embeddings stage's error
    say the same thing, so the two refusals cannot drift apart."""
    from transformers import LlamaForCausalLM

    from langadapt.embeddings.transfer import transfer_embeddings
    from langadapt.pipeline.preflight import find_problems
    from langadapt.recipe.embeddings import EmbeddingConfig, head_init_problem

    tied, config = tied_base(tmp_path, tiny_en_llama)
    problem = head_init_problem("zero", tied=True)
    assert problem is not None and head_init_problem("same", tied=True) is None
    assert head_init_problem(None, tied=True) is None and head_init_problem("zero", tied=False) is None
    loaded = load_recipe(warm(base=tied), ["embeddings.head_init=zero"])
    lines = find_problems(loaded, ["embeddings"]).lines()
    assert any(line.endswith(f"embeddings.head_init: {problem}") for line in lines), lines
    with pytest.raises(LangadaptError) as caught:
        transfer_embeddings(LlamaForCausalLM(config), tied, tied, EmbeddingConfig(head_init="zero"))
    assert str(caught.value) == f"embeddings.head_init: {head_init_problem('zero', True, 'LlamaForCausalLM')}"


def test_a_share_alike_source_without_export_license_is_refused_before_training(warm, tmp_path: Path,
                                                                               shared_dir: Path) -> None:
    """The sources' licence notes are known before any stage: `export.license` was asked for after all training."""
    corpus = tmp_path / "nb.jsonl.gz"
    shutil.copy(shared_dir / "corpora" / "nb.debian-handbook.train.jsonl.gz", corpus)
    Path(f"{corpus}.LICENSE.txt").write_text("nb.jsonl.gz: test corpus\n  licence: CC-BY-SA-3.0\n")
    result = langadapt("run", str(warm(corpus=str(corpus))))
    assert_refused(result, tmp_path, "export.license", "source nb", "CC-BY-SA", "--set export.license=")
    assert langadapt("run", str(warm(corpus=str(corpus))), "--set", "export.license=cc-by-sa-3.0",
                     "--dry-run").returncode == 0


def test_keep_base_with_another_vocab_size_is_said(warm, tmp_path: Path) -> None:
    """keep_base used to ignore a written vocab_size without a word (plan and card described a vocabulary never built)."""
    result = langadapt("run", str(warm()), "--set", "tokenizer.kind=keep_base", "--dry-run")  # vocab_size: 1000
    assert result.returncode == 0, result.stderr
    assert "tokenizer.vocab_size: 1,000 is ignored with kind keep_base" in result.stderr
    assert "8,192 ids" in result.stderr
    same = langadapt("run", str(warm()), "--set", "tokenizer.kind=keep_base", "--set", "tokenizer.vocab_size=8192",
                     "--dry-run")
    assert same.returncode == 0 and "is ignored" not in same.stderr, same.stderr


def test_a_corpus_of_blank_documents_is_blamed_on_its_file_not_vocab_size(warm, tmp_path: Path) -> None:
    corpus = tmp_path / "blank.jsonl"
    corpus.write_text('{"text": "   "}\n{"text": "\\n\\t\\n"}\n' * 40)
    result = langadapt("run", str(warm(corpus=str(corpus))))
    line = assert_refused(result, tmp_path, "data.sources[0].path", "every document of source nb is empty or whitespace",
                          "blank.jsonl")
    assert "vocab_size" not in line


def test_a_base_to_be_built_from_a_partial_architecture_is_checked_with_transformers_defaults(tmp_path: Path,
                                                                                               shared_dir: Path) -> None:
    """A build recipe that leaves shape keys to transformers' defaults: the dry run said NOT valid
    ("config.json has no 'num_attention_heads'") while the real run built the base and went on."""
    corpus = shared_dir / "corpora" / "nb.debian-handbook.train.jsonl.gz"
    (tmp_path / "source.yaml").write_text(
        f"name: source\nrun_root: {tmp_path}/runs\ninit: scratch\nbase_model:\n  architecture: "
        "{model_type: llama, hidden_size: 64, intermediate_size: 128, num_hidden_layers: 1}\n"
        f"data:\n  sources:\n    - {{name: nb, path: {corpus}, lang: nb}}\ntokenizer: {{kind: byte_bpe, vocab_size: 1000}}\n")
    warm = WARM.format(root=tmp_path, base=f"{tmp_path}/runs/source/export/model", corpus=corpus).replace(
        "base_model:\n", f"base_model:\n  build_recipe: {tmp_path}/source.yaml\n")
    (tmp_path / "recipe.yaml").write_text(warm)
    result = langadapt("run", str(tmp_path / "recipe.yaml"), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "num_attention_heads" not in result.stderr
    plan = json.loads(langadapt("plan", str(tmp_path / "recipe.yaml"), "--json").stdout)
    assert plan["model"]["heads"] == 32  # LlamaConfig's default, as the built base will have it


def test_without_network_the_dry_run_names_the_hub_base_and_datasets_it_cannot_reach(tmp_path: Path, monkeypatch) -> None:
    """Without HF_HUB_OFFLINE a machine with no route to the Hub passed the dry run; the run then stopped at once."""
    from langadapt.pipeline import preflight
    from langadapt.pipeline.preflight import find_problems

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(preflight, "_HUB_ANSWERED", {})
    probes = []
    monkeypatch.setattr(preflight, "hub_reachable", lambda repo, kind, timeout: probes.append(kind) or False)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"name: hub\nrun_root: {tmp_path}/runs\nbase_model: {{path: langadapt-test/no-such-base}}\n"
                      "data:\n  sources:\n"
                      "    - {name: a, path: langadapt-test/no-such-data, format: hf_hub, lang: nb, split: train}\n"
                      "    - {name: b, path: langadapt-test/other-data, format: hf_hub, lang: nb, split: train}\n"
                      "tokenizer: {vocab_size: 1000}\n")
    lines = find_problems(load_recipe(recipe)).lines()
    assert any("data.sources[0].path: Hub dataset langadapt-test/no-such-data is not cached here, and the Hub "
               "cannot be reached" in line for line in lines), lines
    assert any("data.sources[1].path" in line for line in lines), lines
    assert any("base_model.path: langadapt-test/no-such-base is not in the local Hugging Face cache, and the Hub "
               "cannot be reached" in line for line in lines), lines
    assert sorted(probes) == ["dataset", "model"]  # one probe per kind, not one per source
