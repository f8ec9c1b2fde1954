"""Export of real tiny runs: a scratch base and a warm run adapted from it, both trained for a few
steps on ../shared text (one module-scoped build, ~1 minute on 2 cores).

Round trip with plain transformers, the card's metadata and body, the licence rule, checkpoint
export to a branch, the push up to the huggingface_hub boundary with a planted token, bad input.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch

from langadapt import cli
from langadapt.pipeline.runner import run_pipeline
from langadapt.recipe import load_recipe
from langadapt.run.completion import is_complete
from langadapt.run.layout import RunLayout

pytestmark = pytest.mark.slow  # one module-scoped build of two real runs (about a minute on 2 idle cores)

LICENCE_NOTE = "x.jsonl.gz: test corpus\n  licence: GPL-2.0+ or CC-BY-SA-3.0 (debian/copyright of debian-handbook)\n"
PLANTED_TOKEN = "hf_plantedTESTtoken0123456789abcdefXYZ"

SOURCE = """\
name: src
run_root: {root}/runs
init: scratch
base_model:
  architecture: {{model_type: llama, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2,
                 num_attention_heads: 2, num_key_value_heads: 1, max_position_embeddings: 96,
                 tie_word_embeddings: false}}
data:
  sources:
    - {{name: en, path: {shared}/corpora/en.debian-handbook.train.jsonl.gz, lang: en, max_docs: 30}}
tokenizer: {{kind: byte_bpe, vocab_size: 300}}
stage2: {{steps: 3, micro_batch_size: 2, seq_len: 32, log_every: 1, checkpoint: {{every_steps: 2}}}}
evaluation: {{suites: []}}
export: {{dtype: float32}}
"""

WARM = """\
name: warm
run_root: {root}/runs
init: warm
base_model: {{path: {root}/runs/src/export/model, build_recipe: {root}/src.yaml}}
data:
  sources:
    - {{name: nb, path: {root}/nb.jsonl.gz, lang: nb, max_docs: 30}}
tokenizer: {{kind: inherit, vocab_size: 320}}
stage1: {{steps: 2, micro_batch_size: 2, seq_len: 32, log_every: 1}}
stage2: {{steps: 4, checkpoint: {{every_steps: 2, keep_last: 3}}}}
evaluation: {{suites: [{root}/suite.yaml], max_bytes_per_lang: 1500, window: 32}}
export: {{dtype: float32}}
"""

SUITE = "name: tiny\ndescription: held-out bits per byte\ntasks:\n  - {kind: bpb, name: heldout_bpb, langs: [nb]}\n"
CHAT_TEMPLATE = "{% for m in messages %}<s>{{ m['content'] }}</s>{% endfor %}"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, shared_dir: Path) -> Path:
    """Both runs, the warm one up to evaluation (the tests export it); the base's tokenizer is
    given a chat template (naming only tokens the new vocabulary has) before the warm run reads it."""
    root = tmp_path_factory.mktemp("export")
    shutil.copy(shared_dir / "corpora" / "nb.debian-handbook.train.jsonl.gz", root / "nb.jsonl.gz")
    (root / "nb.jsonl.gz.LICENSE.txt").write_text(LICENCE_NOTE)
    (root / "suite.yaml").write_text(SUITE)
    (root / "src.yaml").write_text(SOURCE.format(root=root, shared=shared_dir))
    (root / "warm.yaml").write_text(WARM.format(root=root))
    torch.set_num_threads(1)
    run_pipeline(load_recipe(root / "src.yaml"))
    base = RunLayout(root / "runs" / "src").export.model
    config = json.loads((base / "tokenizer_config.json").read_text())
    (base / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": CHAT_TEMPLATE}))
    run_pipeline(load_recipe(root / "warm.yaml"), until="evaluate")
    return root


def export(root: Path, *extra: str) -> int:
    return cli.main(["export", str(root / "warm.yaml"), "--set", "export.license=cc-by-sa-3.0", *extra])


def one_error_line(capsys: pytest.CaptureFixture[str], *fragments: str) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("langadapt: error:")]
    assert len(err) == 1, err
    assert all(f in err[0] for f in fragments), err[0]
    return err[0]


def logits(folder: Path, ids: torch.Tensor) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    with torch.no_grad():
        return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)(ids).logits


@pytest.fixture()
def fake_hub(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict]]:
    """HfApi replaced at the huggingface_hub boundary: every call is recorded, nothing leaves."""
    import huggingface_hub

    calls: list[tuple[str, dict]] = []

    class FakeApi:
        def create_repo(self, repo_id: str, **kwargs) -> str:
            calls.append(("create_repo", {"repo_id": repo_id, **kwargs}))
            return f"https://huggingface.co/{repo_id}"

        def create_branch(self, repo_id: str, **kwargs) -> None:
            calls.append(("create_branch", {"repo_id": repo_id, **kwargs}))

        def create_commit(self, repo_id: str, operations, **kwargs) -> str:
            calls.append(("create_commit", {"repo_id": repo_id, "operations": list(operations), **kwargs}))
            return "https://huggingface.co/commit/1"

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    monkeypatch.setenv("HF_TOKEN", PLANTED_TOKEN)
    return calls


def test_a_share_alike_corpus_needs_a_chosen_licence(built: Path, capsys) -> None:
    assert cli.main(["export", str(built / "warm.yaml")]) == cli.EXIT_USER_ERROR
    one_error_line(capsys, "export.license", "source nb", "CC-BY-SA")
    assert not is_complete(RunLayout(built / "runs" / "warm").export.root)


def test_round_trip_with_plain_transformers_and_the_card(built: Path, capsys) -> None:
    from huggingface_hub import ModelCard
    from transformers import AutoTokenizer

    assert export(built) == 0
    layout = RunLayout(built / "runs" / "warm")
    folder = layout.export.model
    tokenizer = AutoTokenizer.from_pretrained(folder)
    ids = torch.tensor([tokenizer("Norge er et land som")["input_ids"] + list(range(3, 60))])
    diff = (logits(folder, ids) - logits(layout.stage2.model, ids)).abs().max().item()
    assert diff <= 1e-5
    config = json.loads((folder / "config.json").read_text())
    assert tokenizer.model_max_length == config["max_position_embeddings"] == 96
    assert tokenizer.chat_template == CHAT_TEMPLATE  # carried over from the base
    summary = json.loads(layout.manifest("export").read_text())["summary"]
    assert summary["verification"]["max_abs_logit_diff"] <= 1e-5
    assert summary["verification"]["prompt"] == "Norge er et land som"  # nb's default, not "Det er"

    card = ModelCard.load(folder / "README.md")
    data = card.data.to_dict()
    assert data["language"] == ["nb"] and data["license"] == "cc-by-sa-3.0"
    assert data["pipeline_tag"] == "text-generation" and "vocabulary-transfer" in data["tags"]
    assert "base_model" not in data  # a local base folder names nothing on the Hub
    results = {r.dataset_config: r.metric_value for r in card.data.eval_results}
    measured = json.loads(layout.evaluation_results.read_text())["models"]["adapted"]["nb"]["bits_per_byte"]
    assert results == {"nb": pytest.approx(measured, abs=1e-4)}
    text = card.text
    for fragment in ("Stage 1", "Stage 2", "`mean` embedding transfer", "GPL-2.0+ or CC-BY-SA-3.0",
                     "| adapted |", "Held-out text", "tokens per word", "Intended use"):
        assert fragment in text, fragment
    recipe = (folder / "langadapt_recipe.yaml").read_text()
    assert str(built) not in recipe and "<local>/nb.jsonl.gz" in recipe


def test_a_scratch_card_says_so_and_nothing_about_a_transfer(built: Path) -> None:
    from huggingface_hub import ModelCard

    card = ModelCard.load(RunLayout(built / "runs" / "src").export.card)
    assert "init: scratch" in card.text
    lowered = card.text.lower()
    for absent in ("transfer", "stage 1", "stage1", "frozen", "adapted from", "embedding"):
        assert absent not in lowered, absent
    assert "vocabulary-transfer" not in card.data.tags and card.data.base_model is None


def test_card_names_hub_base_and_datasets(built: Path, tmp_path: Path) -> None:
    from huggingface_hub import ModelCard

    from langadapt.export.card import Exported, build_card
    from langadapt.export.provenance import RunFacts, SourceFacts
    from langadapt.recipe.export import ExportConfig
    from langadapt.run.base_model import hub_repo_id

    snapshot = tmp_path / "hub" / "models--my-org--base-7b" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    assert hub_repo_id(str(snapshot)) == "my-org/base-7b" and hub_repo_id("my-org/base-7b") == "my-org/base-7b"
    assert hub_repo_id(str(tmp_path)) is None and hub_repo_id("runs/x/export/model") is None
    facts = RunFacts(init="warm", base_hub_id="my-org/base-7b", base_label="my-org/base-7b", target_languages=("nb",), sources=(
        SourceFacts("nb", "nb", "target", ("my-org/nb-web",), (), "5%"),
        SourceFacts("nb2", "nb", "target", ("my-org/nb-web",), (), "5%"),  # same dataset, another part: named once
        SourceFacts("fi", "fi", "replay", ("my-org/fi-eval",), (), "5%")))  # never trained on: not a training dataset
    card = build_card(RunLayout(built / "runs" / "warm"), facts, ExportConfig(license="apache-2.0"),
                      Exported("adapted", ("stage1", "stage2"), {"max_abs_logit_diff": 0.0, "prompt": "x"}))
    card.save(tmp_path / "README.md")
    data = ModelCard.load(tmp_path / "README.md").data
    assert data.base_model == "my-org/base-7b" and data.base_model_relation == "finetune"
    assert data.datasets == ["my-org/nb-web"]


def test_checkpoint_export_in_shards_pushed_to_a_branch_and_no_token_anywhere(
        built: Path, fake_hub, capsys, caplog) -> None:
    from safetensors.torch import load_file

    caplog.set_level(logging.INFO, logger="langadapt")
    layout = RunLayout(built / "runs" / "warm")
    args = ["--checkpoint", "stage2/2", "--set", "export.max_shard_size=60KB", "--push-to-hub", "my-org/tiny"]
    assert export(built, *args) == 0
    folder = layout.checkpoint_export("stage2-step2").model
    assert (folder / "model.safetensors.index.json").is_file() and len(list(folder.glob("*.safetensors"))) > 1
    weights = load_file(layout.stage2.checkpoints / "step_00000002" / "model.safetensors")
    exported = {}
    for shard in folder.glob("*.safetensors"):
        exported.update(load_file(shard))
    assert all(torch.equal(exported[name], tensor) for name, tensor in weights.items())
    assert not torch.equal(weights["lm_head.weight"], load_file(layout.stage2.model / "model.safetensors")["lm_head.weight"])

    calls = dict(fake_hub)
    assert [name for name, _ in fake_hub] == ["create_repo", "create_branch", "create_commit"]
    assert calls["create_branch"]["branch"] == "stage2-step2" and calls["create_commit"]["revision"] == "stage2-step2"
    pushed = sorted(op.path_in_repo for op in calls["create_commit"]["operations"])
    assert pushed == sorted(p.name for p in folder.iterdir()) and "README.md" in pushed

    written = "".join(r.getMessage() for r in caplog.records) + capsys.readouterr().out
    assert "stage2-step2" in written
    for path in built.rglob("*"):
        if path.is_file():
            assert PLANTED_TOKEN.encode() not in path.read_bytes(), path
    assert PLANTED_TOKEN not in written

    assert export(built, "--checkpoint", "stage2/2") == cli.EXIT_USER_ERROR  # exists already: kept
    one_error_line(capsys, "exists already", "--overwrite")
    assert (folder / "README.md").is_file()


def test_push_of_the_final_export_to_main_and_a_revision(built: Path, fake_hub) -> None:
    assert export(built) == 0  # up to date or exported: either way verified
    assert export(built, "--push-to-hub", "my-org/tiny", "--revision", "v0.1") == 0
    calls = dict(fake_hub)
    assert calls["create_branch"]["branch"] == "v0.1" and calls["create_commit"]["revision"] == "v0.1"
    folder = RunLayout(built / "runs" / "warm").export.model
    ops = {op.path_in_repo: op for op in calls["create_commit"]["operations"]}
    assert set(ops) == {p.name for p in folder.iterdir()} and "model.safetensors" in ops


def test_a_corrupted_export_is_not_pushed(built: Path, fake_hub, capsys) -> None:
    from safetensors.torch import load_file, save_file

    assert export(built) == 0
    folder = RunLayout(built / "runs" / "warm").export.model
    weights = load_file(folder / "model.safetensors")
    original = (folder / "model.safetensors").read_bytes()
    weights["lm_head.weight"] = weights["lm_head.weight"].flip(0).contiguous()  # rows swapped
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    try:
        assert export(built, "--push-to-hub", "my-org/tiny") == cli.EXIT_USER_ERROR
        one_error_line(capsys, "logits differ")
        assert fake_hub == []
    finally:
        (folder / "model.safetensors").write_bytes(original)


@pytest.mark.parametrize("args, fragments", [
    (["--push-to-hub", "not a repo!"], ("not a valid Hub repo id",)),
    (["--push-to-hub", "org/x", "--revision", "bad..name"], ("--revision bad..name",)),
    (["--revision", "v1"], ("--revision", "--push-to-hub")),
    (["--checkpoint", "stage2/99"], ("no complete checkpoint at step 99",)),
    (["--checkpoint", "stage3/1"], ("expected STAGE/STEP",)),
])
def test_bad_input_is_one_line_before_any_work(built: Path, fake_hub, capsys, args, fragments) -> None:
    assert export(built, *args) == cli.EXIT_USER_ERROR
    one_error_line(capsys, *fragments)
    assert fake_hub == []


def test_a_missing_token_stops_before_any_work(built: Path, fake_hub, monkeypatch, tmp_path, capsys) -> None:
    from huggingface_hub import constants

    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    assert export(built, "--push-to-hub", "my-org/tiny") == cli.EXIT_USER_ERROR
    one_error_line(capsys, "no Hugging Face token", "HF_TOKEN")
    assert fake_hub == []


def test_a_run_with_no_completed_training_stage_is_refused(built: Path, capsys) -> None:
    recipe = built / "untrained.yaml"
    recipe.write_text((built / "warm.yaml").read_text().replace("name: warm", "name: untrained"))
    assert cli.main(["export", str(recipe)]) == cli.EXIT_USER_ERROR
    one_error_line(capsys, "no completed training stage")
    assert not (built / "runs" / "untrained" / "export").exists()


def test_a_bfloat16_export_passes_within_its_own_bound(built: Path) -> None:
    from safetensors import safe_open

    assert export(built, "--checkpoint", "stage2/4", "--set", "export.dtype=bfloat16") == 0
    paths = RunLayout(built / "runs" / "warm").checkpoint_export("stage2-step4")
    check = json.loads((paths.root / "manifest.json").read_text())["summary"]["verification"]
    assert 0 < check["max_abs_logit_diff"] <= check["allowed"] < 1.0  # a real cast, checked, not waved through
    with safe_open(paths.model / "model.safetensors", "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.bfloat16}


@pytest.mark.parametrize("kind, expected", [
    ("keep_base", "keeping its own 4096-token tokenizer (`keep_base`): every embedding row is the base's."),
    ("extend", "with its tokenizer extended to 8192 tokens (`extend`"),
    ("inherit", "with a new 8192-token tokenizer (`inherit`) trained on the target language"),
])
def test_the_card_names_the_vocabulary_road(kind, expected):
    from langadapt.export.card import vocabulary_text

    vocab = 4096 if kind == "keep_base" else 8192
    text = vocabulary_text({"kind": kind, "vocab_size": vocab}, {"method": "mean"})
    assert text.startswith(expected)
    assert ("new tokens' rows were initialised with `mean`" in text) == (kind == "extend")
