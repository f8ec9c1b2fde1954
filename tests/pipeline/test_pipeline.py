"""The run directory contract with stub stages: order, markers, manifests, skip/resume/force."""

from __future__ import annotations

import json
import os
import signal
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers.recipes import scratch_recipe

from langadapt.errors import LangadaptError
from langadapt.pipeline import runner as pipeline
from langadapt.pipeline.runner import STAGES, Stage, run_pipeline
from langadapt.planning.recipe_plan import run_plan_file
from langadapt.recipe import load_recipe
from langadapt.run import completion
from langadapt.run.fingerprint import hash_json
from langadapt.run.layout import MARKER, RunLayout, read_manifest
from langadapt.runtime import signals

SIGNALLED: set[str] = set()
"""Stub stages during which a SIGUSR1 (Slurm's time-limit warning) arrives."""


@pytest.fixture()
def stub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A recipe whose stages only record that they ran (and fail on demand)."""
    # enough distinct words that a 300-token vocabulary is learnable (the preflight check)
    (tmp_path / "nb.txt").write_text(" ".join(f"ord{i}" for i in range(30)))
    path = tmp_path / "r.yaml"
    path.write_text(scratch_recipe(tmp_path, "stub"))
    calls: list[str] = []
    failing: set[str] = set()
    SIGNALLED.clear()

    def fake_table(recipe):
        def make(name):
            def run(ctx):
                if name in failing:
                    raise LangadaptError(f"{name} failed")
                if name in SIGNALLED:
                    os.kill(os.getpid(), signal.SIGUSR1)
                (ctx.out / "artifact.txt").write_text(name)
                calls.append(name)
                return {"ran": name}
            return run
        return [Stage(name, (), make(name), "init: scratch has no embedding stage" if name == "stage1" else None)
                for name in STAGES]

    monkeypatch.setattr(pipeline, "stage_table", fake_table)
    monkeypatch.setattr(pipeline, "fingerprints", lambda loaded, stages, *inputs: {
        s.name: hash_json([loaded.recipe.model_dump(mode="json"), s.name]) for s in stages})
    return path, calls, failing


def test_runs_in_order_with_manifest_and_marker(stub) -> None:
    path, calls, _ = stub
    run_pipeline(load_recipe(path))
    assert calls == ["data", "tokenizer", "embeddings", "stage2", "evaluate", "export"]
    run_dir = load_recipe(path).recipe.run_dir
    manifest = json.loads((run_dir / "data" / "manifest.json").read_text())
    assert manifest["summary"] == {"ran": "data"} and "torch" in manifest["versions"]
    assert (run_dir / "export" / MARKER).is_file()
    assert not (run_dir / "stage1").exists()
    assert (run_dir / "recipe.resolved.yaml").read_text().startswith("name: stub")


def test_second_run_does_nothing(stub) -> None:
    path, calls, _ = stub
    run_pipeline(load_recipe(path))
    calls.clear()
    actions = dict(run_pipeline(load_recipe(path)))
    assert calls == []
    assert actions["data"].startswith("skip (complete")


def test_changed_config_reruns_that_stage_and_downstream(stub, monkeypatch) -> None:
    path, calls, _ = stub
    run_pipeline(load_recipe(path))
    calls.clear()
    # the real fingerprints chain stages; emulate "tokenizer changed" by changing its print
    original = pipeline.fingerprints
    def changed(loaded, stages, *inputs):
        prints = original(loaded, stages, *inputs)
        for name in STAGES[STAGES.index("tokenizer"):]:
            prints[name] += "-changed"
        return prints
    monkeypatch.setattr(pipeline, "fingerprints", changed)
    run_pipeline(load_recipe(path))
    assert calls == ["tokenizer", "embeddings", "stage2", "evaluate", "export"]


def test_only_from_until_force(stub) -> None:
    path, calls, _ = stub
    run_pipeline(load_recipe(path), until="tokenizer")
    assert calls == ["data", "tokenizer"]
    calls.clear()
    run_pipeline(load_recipe(path), only="tokenizer")
    assert calls == ["tokenizer"]
    calls.clear()
    run_pipeline(load_recipe(path))
    assert calls == ["embeddings", "stage2", "evaluate", "export"]
    calls.clear()
    run_pipeline(load_recipe(path), start="evaluate")
    assert calls == ["evaluate", "export"]
    calls.clear()
    run_pipeline(load_recipe(path), force=True)
    assert calls == ["data", "tokenizer", "embeddings", "stage2", "evaluate", "export"]


def test_only_needs_upstream_complete(stub) -> None:
    path, _, _ = stub
    with pytest.raises(LangadaptError, match="stage data is not complete"):
        run_pipeline(load_recipe(path), only="embeddings")


def test_failed_stage_is_never_marked_complete(stub) -> None:
    path, calls, failing = stub
    failing.add("embeddings")
    with pytest.raises(LangadaptError):
        run_pipeline(load_recipe(path))
    run_dir = load_recipe(path).recipe.run_dir
    assert not completion.is_complete(run_dir / "embeddings")
    assert completion.is_complete(run_dir / "tokenizer")
    failing.clear()
    calls.clear()
    run_pipeline(load_recipe(path))
    assert calls == ["embeddings", "stage2", "evaluate", "export"]


def test_signal_during_a_stage_stops_before_the_next_and_keeps_it(stub, monkeypatch) -> None:
    """Slurm's warning during the data stage: that stage still completes, then exit 75 (requeue)."""
    path, calls, _ = stub
    monkeypatch.setattr(signals, "_latched", [])
    previous = {sig: signal.getsignal(sig) for sig in signals.STOP_SIGNALS}
    try:
        signals.latch_stop_signals()
        SIGNALLED.add("tokenizer")
        with pytest.raises(signals.Preempted) as stopped:
            run_pipeline(load_recipe(path))
        assert stopped.value.code == signals.REQUEUE_EXIT_CODE and "before stage embeddings" in str(stopped.value)
        assert calls == ["data", "tokenizer"]
        assert completion.is_complete(load_recipe(path).recipe.run_dir / "tokenizer")
        signals.clear_stop()  # the requeued job: a new process, no signal yet
        SIGNALLED.clear()
        run_pipeline(load_recipe(path))
        assert calls == ["data", "tokenizer", "embeddings", "stage2", "evaluate", "export"]
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def test_dry_run_touches_nothing(stub) -> None:
    path, calls, _ = stub
    actions = dict(run_pipeline(load_recipe(path), dry_run=True))
    assert calls == [] and actions["data"] == "run" and actions["stage1"].startswith("skip (init: scratch")
    assert not load_recipe(path).recipe.run_dir.exists()


def test_unknown_stage_name(stub) -> None:
    path, _, _ = stub
    with pytest.raises(LangadaptError, match="--only stage3: unknown stage; stages are data, tokenizer"):
        run_pipeline(load_recipe(path), only="stage3")


def test_fetched_sources_do_not_change_the_fingerprint_once_fetched(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    target = tmp_path / "nb.jsonl.gz"
    recipe.write_text(scratch_recipe(tmp_path, "stub").replace(
        f"path: {tmp_path}/nb.txt, lang: nb", f"path: {target}, lang: nb, fetch: {{debian_package: x, locale: nb}}"))
    loaded = load_recipe(recipe)
    before = pipeline.fingerprints(loaded, pipeline.stage_table(loaded.recipe))
    target.write_bytes(b"fetched later")
    after = pipeline.fingerprints(loaded, pipeline.stage_table(loaded.recipe))
    assert before == after


@pytest.mark.parametrize("change, retrains", [
    ("stage2.checkpoint.every_steps=7", False), ("stage2.checkpoint.at_end=false", False),
    ("stage2.log_every=3", False), ("stage2.loggers=[]", False), ("stage2.validation.every_steps=5", False),
    ("stage2.profile_steps=[2, 3]", False), ("stage2.steps=9", True), ("stage2.optimizer.lr=0.5", True),
])
def test_watching_and_saving_keys_leave_the_training_fingerprints(tmp_path: Path, change: str, retrains: bool) -> None:
    """Checkpoint cadence, logging, validation and profiling do not change the trained model: editing
    them mid-run must resume the stage (a changed print discards its partial work), not re-train it."""
    path = tmp_path / "r.yaml"
    path.write_text(scratch_recipe(tmp_path, "stub"))
    prints = [pipeline.fingerprints(loaded, pipeline.stage_table(loaded.recipe))
              for loaded in (load_recipe(path), load_recipe(path, [change]))]
    assert prints[0]["stage1"] == prints[1]["stage1"]
    assert (prints[0]["stage2"] != prints[1]["stage2"]) == retrains


WARM_MIX = """\
name: mix
run_root: {root}/runs
base_model: {{path: {root}/base}}
data:
  sources:
    - {{name: nb, path: {root}/nb.txt, lang: nb, weight: 0.8}}
    - {{name: en, path: {root}/en.txt, lang: en, role: replay, epochs: 1}}
tokenizer:
  vocab_size: 300
"""


@pytest.fixture()
def real_prints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A warm recipe with the real stage table and fingerprints, whose stages only record their calls."""
    (tmp_path / "nb.txt").write_text("hei")
    (tmp_path / "en.txt").write_text("hello")
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "config.json").write_text('{"model_type": "llama"}')
    path = tmp_path / "r.yaml"
    path.write_text(WARM_MIX.format(root=tmp_path))
    calls: list[str] = []
    real_table = pipeline.stage_table

    def stub_table(recipe):
        def make(name):
            def run(ctx):
                calls.append(name)
                return {}
            return run
        # stand-ins read no token shards: the epochs check before training has nothing to plan on
        return [replace(stage, run=make(stage.name), early_check=None) for stage in real_table(recipe)]

    monkeypatch.setattr(pipeline, "stage_table", stub_table)
    monkeypatch.setattr(pipeline, "check_recipe", lambda loaded, selected: None)  # stubs read nothing
    return path, calls


FROM_STAGE1 = ["stage1", "stage2", "evaluate", "export"]
EVERYTHING = ["data", "tokenizer", "embeddings", *FROM_STAGE1]


@pytest.mark.parametrize("change, reruns", [
    # the training mixture and repetition: read by the training stages only
    ("data.sources[0].weight=0.5", FROM_STAGE1), ("data.sources[1].epochs=2", FROM_STAGE1),
    ("data.sources[0].max_epochs=3", FROM_STAGE1), ("data.force_epochs=true", FROM_STAGE1),
    ("data.document_masking=true", FROM_STAGE1), ("stage1.mixture={nb: {weight: 1}}", FROM_STAGE1),
    # how fast the shards are encoded, and a size only `plan` reads: nothing
    ("data.num_workers=2", []), ("data.sources[0].unique_tokens=1000", []),
    # what the data stage reads: everything
    ("data.cleaning.min_chars=2", EVERYTHING), ("data.valid_fraction=0.1", EVERYTHING),
    ("data.sources[0].max_docs=5", EVERYTHING), ("data.sources[1].lang=nn", EVERYTHING),
])
def test_a_changed_data_key_re_runs_the_stages_that_read_it(real_prints, change: str, reruns: list[str]) -> None:
    """Re-weighting a mixture re-trains; it does not re-clean, re-tokenise or re-initialise (hours
    at scale): each stage's fingerprint covers the keys that stage reads, wherever the YAML keeps them."""
    path, calls = real_prints
    run_pipeline(load_recipe(path))
    assert calls == EVERYTHING
    calls.clear()
    actions = dict(run_pipeline(load_recipe(path, [change])))
    assert calls == reruns
    assert all(actions[name] == "skip (complete, inputs unchanged)" for name in EVERYTHING if name not in reruns)


@pytest.mark.parametrize("change, reruns", [
    # what only `langadapt plan` reads, for the report's planned energy: nothing (the run rewrites plan.json)
    ("cluster.hardware=a100", []), ("cluster.mfu=0.3", []), ("cluster.nodes=2", []),
    # how a training stage is watched: nothing, not even the report
    ("stage2.log_every=7", []), ("stage1.validation.every_steps=5", []),
    ("export.dtype=float32", ["export"]),
])
def test_a_changed_key_re_runs_the_report_that_reads_it(real_prints, change: str, reruns: list[str]) -> None:
    """A finished run whose cluster changes re-runs no evaluation: the report's planned energy is an
    estimate, read from the plan.json each run writes, outside evaluate's print."""
    path, calls = real_prints
    run_pipeline(load_recipe(path))
    calls.clear()
    plan = run_plan_file(RunLayout(load_recipe(path).recipe.run_dir))
    plan.unlink()
    actions = dict(run_pipeline(load_recipe(path, [change])))
    assert calls == reruns and plan.is_file()
    assert all(actions[name] == "skip (complete, inputs unchanged)" for name in EVERYTHING if name not in reruns)


WEIGHTED_EN = ["data.sources[1].epochs=null", "data.sources[1].weight=0.2"]
"""WARM_MIX with en by weight: a replay share cannot be combined with an epochs source."""


@pytest.mark.parametrize("change, reruns", [
    ("data.replay=0.3", FROM_STAGE1), ("stage1.replay=0.3", FROM_STAGE1), ("stage2.replay=0.3", FROM_STAGE1[1:]),
])
def test_a_replay_share_re_runs_training_only(real_prints, change: str, reruns: list[str]) -> None:
    """The share is a mixture setting: it re-trains, never re-cleans, re-tokenises or re-initialises."""
    path, calls = real_prints
    run_pipeline(load_recipe(path, WEIGHTED_EN))
    calls.clear()
    run_pipeline(load_recipe(path, [*WEIGHTED_EN, change]))
    assert calls == reruns


def test_training_streams_the_stage_mixture_with_its_replay_share(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """What the training stage gets is `recipe.replay.stage_mixture`, the mixture `plan` reports."""
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "config.json").write_text('{"model_type": "llama"}')
    path = tmp_path / "r.yaml"
    path.write_text(WARM_MIX.format(root=tmp_path))
    stages = {s.name: s for s in pipeline.stage_table(load_recipe(path, [*WEIGHTED_EN, "stage2.replay=0.35"]).recipe)}
    stage1, stage2 = stages["stage1"].run.slice, stages["stage2"].run.slice
    assert stage1.mixture == {"nb": {"weight": 0.8}, "en": {"weight": 0.2}}  # no share: the weights as written
    assert stage2.mixture["nb"]["weight"] == pytest.approx(0.65) and stage2.mixture["en"]["weight"] == pytest.approx(0.35)
    assert (stage1.name, stage2.name, stage1.after_stage1, stage2.after_stage1) == ("stage1", "stage2", False, True)


def test_data_num_workers_reaches_the_tokenizer_stage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import langadapt.tokenizer.stage as tokenizer_stage

    path = tmp_path / "r.yaml"
    path.write_text(scratch_recipe(tmp_path, "stub"))
    seen: dict[str, int | None] = {}
    monkeypatch.setattr(tokenizer_stage, "run", lambda job, ctx: seen.update(n=job.num_workers) or {})
    stages = {s.name: s for s in pipeline.stage_table(load_recipe(path, ["data.num_workers=3"]).recipe)}
    stages["tokenizer"].run(SimpleNamespace())
    assert seen == {"n": 3}


def test_stage_lines_of_a_run_inside_another_name_that_run(stub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    """The base model's and the cold twin's pipelines run inside the user's run: their console
    lines say whose they are instead of interleaving unlabelled with the user's stages."""
    path, _, _ = stub
    inner = tmp_path / "cold.yaml"
    inner.write_text(scratch_recipe(tmp_path, "stub_cold"))
    stubs = pipeline.stage_table  # the fixture's

    def with_a_run_inside(recipe):
        stages = stubs(recipe)
        if recipe.name != "stub":
            return stages

        def tokenizer_then_the_twin(ctx):
            run_pipeline(load_recipe(inner), until="data")
            return stages[1].run(ctx)
        return [stages[0], replace(stages[1], run=tokenizer_then_the_twin), *stages[2:]]

    monkeypatch.setattr(pipeline, "stage_table", with_a_run_inside)
    with caplog.at_level("INFO", logger="langadapt"):
        run_pipeline(load_recipe(path), until="embeddings")
    lines = [record.getMessage() for record in caplog.records]
    assert [line.split(" run")[0] for line in lines if line.endswith(" run")] == [
        "data      ", "tokenizer ", "[stub_cold] data      ", "embeddings"]
    with caplog.at_level("INFO", logger="langadapt"):
        caplog.clear()
        run_pipeline(load_recipe(inner), until="data")  # on its own, the twin's lines are unlabelled
    assert any(record.getMessage().startswith("data       skip") for record in caplog.records), caplog.text


def test_the_manifests_config_hash_is_the_recipe_part_its_fingerprint_hashes(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A stage's manifest records as `config_hash` the recipe part of the print the skip decision
    compares (`recipe_hash`: a training stage's `engine.peak_tflops` at its default), not a hash of
    its sections that a display-only key moves."""
    from langadapt.run.fingerprint import recipe_hash, section_hash

    (tmp_path / "nb.txt").write_text(" ".join(f"ord{i}" for i in range(30)))
    path = tmp_path / "r.yaml"
    path.write_text(scratch_recipe(tmp_path, "stub"))
    real = pipeline.stage_table
    monkeypatch.setattr(pipeline, "stage_table", lambda recipe: [
        replace(stage, run=lambda ctx: {}, early_check=None) for stage in real(recipe)])  # the real sections, stub work
    monkeypatch.setattr(pipeline, "check_recipe", lambda loaded, selected: None)
    loaded = load_recipe(path, ["engine.peak_tflops=312"])
    run_pipeline(loaded, until="stage2")
    layout = RunLayout(loaded.recipe.run_dir)
    stages = {stage.name: stage for stage in real(loaded.recipe)}
    for name in ("data", "tokenizer", "embeddings", "stage2"):
        assert read_manifest(layout.stage_dir(name))["config_hash"] == recipe_hash(loaded, stages[name]), name
    stage2 = stages["stage2"]
    assert recipe_hash(loaded, stage2) != section_hash(loaded.recipe, stage2.sections, ignore=stage2.ignores)
