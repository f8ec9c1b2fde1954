"""Catalogue of weak answers to the run's flags and surroundings (issue 23): each case through the
real CLI in process, with stub stages (nothing trains): what `langadapt run` says it did, what
--force/--from/--only do with partial work, empty selections, the run lock of `langadapt eval`,
and a stop signal during the last selected stage.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from helpers.model_folders import header_model
from helpers.recipes import scratch_recipe

from langadapt.cli import main
from langadapt.errors import LangadaptError
from langadapt.pipeline import runner as pipeline
from langadapt.pipeline.runner import RUN_AFRESH, STAGES, Stage, run_pipeline
from langadapt.recipe import load_recipe
from langadapt.run import completion
from langadapt.run import layout as rundir
from langadapt.run.fingerprint import hash_json
from langadapt.run.lock import RunLock
from langadapt.runtime import signals


@dataclass
class Stubs:
    """The stub stages' record: what ran, and which files each found in its folder when it started."""

    recipe: Path
    calls: list[str] = field(default_factory=list)
    found: dict[str, list[str]] = field(default_factory=dict)
    failing: set[str] = field(default_factory=set)
    signalled: set[str] = field(default_factory=set)

    @property
    def run_dir(self) -> Path:
        return load_recipe(self.recipe).recipe.run_dir


@pytest.fixture()
def stubs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stubs]:
    """A scratch recipe whose stages record what they find, leave partial work when failing, and
    send themselves SIGTERM on demand. Signal handlers and the latch are given back afterwards."""
    (tmp_path / "nb.txt").write_text(" ".join(f"ord{i}" for i in range(30)))
    path = tmp_path / "r.yaml"
    path.write_text(scratch_recipe(tmp_path, "stub"))
    record = Stubs(path)

    def make(name: str):
        def run(ctx) -> dict:
            record.found[name] = sorted(p.name for p in ctx.out.iterdir())
            if name in record.signalled:
                os.kill(os.getpid(), signal.SIGTERM)
            if name in record.failing:
                (ctx.out / "partial.txt").write_text("half")
                raise LangadaptError(f"{name} failed")
            (ctx.out / "artifact.txt").write_text(name)
            record.calls.append(name)
            return {"ran": name}
        return run

    monkeypatch.setattr(pipeline, "stage_table", lambda recipe: [
        Stage(name, (), make(name), "disabled in the stub" if name == "stage1" else None) for name in STAGES])
    monkeypatch.setattr(pipeline, "fingerprints", lambda loaded, stages, *inputs: {
        s.name: hash_json([loaded.recipe.model_dump(mode="json"), s.name]) for s in stages})
    monkeypatch.setattr(signals, "_latched", [])
    saved = {sig: signal.getsignal(sig) for sig in signals.STOP_SIGNALS}
    yield record
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def error_line(err: str) -> str:
    """The one `langadapt: error:` line the contract allows, with no traceback."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("langadapt")]
    assert len(lines) == 1 and lines[0].startswith("langadapt: error: "), err
    return lines[0]


# --- 1. the last line says what was done ---------------------------------------------------------

def test_until_says_where_it_stopped_and_what_comes_next(stubs: Stubs, capsys) -> None:
    code, out, _ = cli(capsys, "run", str(stubs.recipe), "--until", "tokenizer", "--set", "seed=7")
    assert code == 0 and stubs.calls == ["data", "tokenizer"]
    assert out.strip().splitlines()[-1] == (
        f"stopped after tokenizer (as --until asked): {stubs.run_dir}; not run yet: embeddings, stage2, "
        f"evaluate, export; next: langadapt run {stubs.recipe} --set seed=7")


def test_only_says_it_ran_one_stage(stubs: Stubs, capsys) -> None:
    cli(capsys, "run", str(stubs.recipe), "--until", "tokenizer")
    code, out, _ = cli(capsys, "run", str(stubs.recipe), "--only", "tokenizer")
    assert code == 0 and out.strip().endswith(f"next: langadapt run {stubs.recipe}")
    assert out.strip().startswith(f"ran only tokenizer (as --only asked): {stubs.run_dir}; not run yet: embeddings")


def test_a_whole_run_and_an_until_the_last_stage_say_complete(stubs: Stubs, capsys) -> None:
    assert cli(capsys, "run", str(stubs.recipe), "--until", "export")[1].strip() == f"run complete: {stubs.run_dir}"
    assert cli(capsys, "run", str(stubs.recipe), "--until", "data")[1].strip() == f"run complete: {stubs.run_dir}"


# --- 2. --force / --from / --only re-run afresh; a plain re-run resumes -----------------------------

def leave_partial(stubs: Stubs, stage: str) -> None:
    stubs.failing.add(stage)
    with pytest.raises(LangadaptError):
        run_pipeline(load_recipe(stubs.recipe))
    stubs.failing.clear()


def test_a_plain_rerun_resumes_a_partial_training_stage(stubs: Stubs) -> None:
    leave_partial(stubs, "stage2")
    actions = dict(run_pipeline(load_recipe(stubs.recipe)))
    assert actions["stage2"] == "resume" and "partial.txt" in stubs.found["stage2"]


@pytest.mark.parametrize("flags", [{"force": True}, {"start": "stage2"}, {"only": "stage2"}])
def test_a_forced_rerun_starts_a_partial_training_stage_afresh(stubs: Stubs, flags: dict) -> None:
    leave_partial(stubs, "stage2")
    assert dict(run_pipeline(load_recipe(stubs.recipe), dry_run=True, **flags))["stage2"] == RUN_AFRESH
    actions = dict(run_pipeline(load_recipe(stubs.recipe), **flags))
    assert actions["stage2"] == RUN_AFRESH and stubs.found["stage2"] == [rundir.FINGERPRINT]
    assert completion.is_complete(stubs.run_dir / "stage2")


def test_a_forced_rerun_discards_a_partial_work_folder_too(stubs: Stubs) -> None:
    leave_partial(stubs, "tokenizer")
    assert dict(run_pipeline(load_recipe(stubs.recipe), start="tokenizer"))["tokenizer"] == RUN_AFRESH
    assert "partial.txt" not in stubs.found["tokenizer"]


def test_the_dry_run_shows_the_afresh_start(stubs: Stubs, capsys) -> None:
    leave_partial(stubs, "stage2")
    _, out, _ = cli(capsys, "run", str(stubs.recipe), "--from", "stage2", "--dry-run")
    assert f"  stage2      {RUN_AFRESH}" in out


def test_a_multi_rank_launch_refuses_to_discard_partial_checkpoints(stubs: Stubs, monkeypatch) -> None:
    leave_partial(stubs, "stage2")
    run_pipeline(load_recipe(stubs.recipe), until="embeddings")
    for name, value in {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(name, value)  # rank 0 of a two-process launch (torchrun's variables)
    with pytest.raises(LangadaptError, match="stage stage2: --force/--from/--only would discard its partial"):
        run_pipeline(load_recipe(stubs.recipe), only="stage2", force=True)
    assert "partial.txt" in {p.name for p in (stubs.run_dir / "stage2").iterdir()}  # refused before anything ran


# --- 3. a selection of no stage -------------------------------------------------------------------

@pytest.mark.parametrize("dry", [[], ["--dry-run"]])
def test_a_reversed_range_is_refused(stubs: Stubs, capsys, dry: list[str]) -> None:
    code, _, err = cli(capsys, "run", str(stubs.recipe), "--from", "evaluate", "--until", "stage1", *dry)
    assert code == 2 and error_line(err) == (
        "langadapt: error: --from evaluate --until stage1: selects no stage (evaluate comes after stage1; "
        "the order is data, tokenizer, embeddings, stage1, stage2, evaluate, export)")
    assert not stubs.run_dir.exists() and stubs.calls == []


def test_only_with_a_range_is_refused(stubs: Stubs, capsys) -> None:
    code, _, err = cli(capsys, "run", str(stubs.recipe), "--only", "data", "--until", "tokenizer")
    assert code == 2 and error_line(err) == (
        "langadapt: error: --only data with --until tokenizer: --only runs one stage, --from/--until a range; "
        "give one or the other")


def test_from_and_until_the_same_stage_is_one_stage(stubs: Stubs) -> None:
    assert pipeline.select_stages(list(STAGES), None, "data", "data") == ["data"]


# --- 4. `langadapt eval` into a run folder takes the run lock --------------------------------------

def _stub_trained_model(run_dir: Path) -> None:
    """A stage 2 model folder that passes eval's model-folder check (headers, no torch): eval refuses
    a run with nothing trained before the lock."""
    header_model(rundir.RunLayout(run_dir).trained("stage2").model)


def test_eval_waits_for_no_one_but_refuses_while_a_run_holds_the_folder(stubs: Stubs, capsys, monkeypatch) -> None:
    from langadapt import evaluation

    run_pipeline(load_recipe(stubs.recipe), until="data")
    _stub_trained_model(stubs.run_dir)
    monkeypatch.setattr(evaluation, "evaluate_cli", lambda *a, **k: pytest.fail("evaluated under another's lock"))
    with RunLock(stubs.run_dir / ".lock"):
        code, _, err = cli(capsys, "eval", str(stubs.run_dir))
    assert code == 2 and f"{stubs.run_dir}: run directory is in use by pid {os.getpid()}" in error_line(err)
    assert not (stubs.run_dir / "eval").exists()


def test_eval_holds_the_lock_while_it_writes(stubs: Stubs, capsys, monkeypatch) -> None:
    from langadapt import evaluation

    run_pipeline(load_recipe(stubs.recipe), until="data")
    _stub_trained_model(stubs.run_dir)
    seen = {}

    def fake_eval(model, suites, out, compare, name=None, texts=None, target=None, scoring=None) -> dict:
        seen["holder"] = json.loads((stubs.run_dir / ".lock").read_text())["pid"]
        return {"models": ["adapted"], "reference": "base"}

    monkeypatch.setattr(evaluation, "evaluate_cli", fake_eval)
    assert cli(capsys, "eval", str(stubs.run_dir), "--out", str(stubs.run_dir / "eval" / "x"))[0] == 0
    assert seen["holder"] == os.getpid() and not (stubs.run_dir / ".lock").exists()


# --- 5. a stop signal during the last selected stage ----------------------------------------------

def test_sigterm_during_until_data_exits_with_the_requeue_code(stubs: Stubs, capsys) -> None:
    stubs.signalled.add("data")
    code, out, err = cli(capsys, "run", str(stubs.recipe), "--until", "data")
    assert code == signals.REQUEUE_EXIT_CODE and "run complete" not in out
    assert f"langadapt: stopped by signal after stage data (completed stages are kept); exit {code}" in err
    assert completion.is_complete(stubs.run_dir / "data")  # it ran to its end: the signal only stops between stages


def test_sigterm_during_a_failing_stage_leaves_it_incomplete(stubs: Stubs, capsys) -> None:
    stubs.signalled.add("data")
    stubs.failing.add("data")
    code, _, err = cli(capsys, "run", str(stubs.recipe), "--until", "data")
    assert code == 2 and error_line(err) == "langadapt: error: data failed"
    assert not completion.is_complete(stubs.run_dir / "data")


# --- 8. a Hub id that is not on this machine, offline -------------------------------------------------

HUB_ID = "nobody-langadapt/no-such-model"
OFFLINE_LINE = (f"{HUB_ID} is not in the local Hugging Face cache, and HF_HUB_OFFLINE=1 keeps the Hub out of "
                f"reach: fetch it where there is network with `hf download {HUB_ID}` (into this "
                "HF_HOME), or point base_model.path at a model folder")


@pytest.fixture()
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_HUB_OFFLINE=1 with an empty cache (huggingface_hub reads both from its constants)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))


def test_an_uncached_hub_id_offline_says_how_to_fetch_it(tmp_path: Path, offline: None) -> None:
    from langadapt.run.base_model import resolve_base_model

    path = tmp_path / "r.yaml"
    path.write_text(scratch_recipe(tmp_path, "stub").replace(
        "init: scratch\nbase_model:\n  architecture: {model_type: llama}\n", f"init: warm\nbase_model:\n  path: {HUB_ID}\n"))
    with pytest.raises(LangadaptError) as error:
        resolve_base_model(load_recipe(path).recipe, fetch=True)
    assert str(error.value) == f"base_model.path: {OFFLINE_LINE}"


def test_the_dry_run_says_it_too(tmp_path: Path, offline: None, capsys) -> None:
    (tmp_path / "nb.txt").write_text(" ".join(f"ord{i}" for i in range(30)))
    path = tmp_path / "r.yaml"
    path.write_text(scratch_recipe(tmp_path, "stub").replace(
        "init: scratch\nbase_model:\n  architecture: {model_type: llama}\n", f"init: warm\nbase_model:\n  path: {HUB_ID}\n"))
    code, _, err = cli(capsys, "run", str(path), "--dry-run")
    assert code == 2 and f"langadapt: error: {path}:5: base_model.path: {OFFLINE_LINE}" in err.splitlines()


# --- 7. a tokenizer without EOS, caught before the data stage -----------------------------------------

def base_without_eos(folder: Path) -> Path:
    """A base model folder whose tokenizer names no EOS token anywhere (tokenizer_config, config.json)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    folder.mkdir()
    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    raw.train_from_iterator(["ord en to tre"] * 5, trainers.BpeTrainer(vocab_size=40, special_tokens=["<s>"]))
    raw.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>"}))
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 40, "hidden_size": 8,
                                                    "max_position_embeddings": 4096}))
    return folder


def test_a_base_tokenizer_without_eos_is_a_preflight_problem(stubs: Stubs, tmp_path: Path, capsys) -> None:
    base = base_without_eos(tmp_path / "base")
    code, _, err = cli(capsys, "run", str(stubs.recipe), "--set", f"base_model={{path: {base}}}",
                       "--set", "tokenizer.kind=keep_base")
    assert code == 2 and stubs.calls == []  # refused before the data stage
    line = error_line(err)  # the long --set flag is shortened in the line
    assert line.startswith("langadapt: error: --set base_model={path: ") and ": base_model.path: " in line
    assert line.endswith(": no EOS token; the token files put one between documents: add eos_token to its "
                         "tokenizer_config.json (or set tokenizer.eos_token to one of tokenizer.special_tokens "
                         "when training one)")


def test_scratch_special_tokens_without_eos(stubs: Stubs, capsys) -> None:
    code, _, err = cli(capsys, "run", str(stubs.recipe), "--set", "tokenizer.special_tokens=[<unk>, <pad>]", "--dry-run")
    assert code == 2 and ("--set tokenizer.special_tokens=[<unk>, <pad>]: tokenizer.special_tokens: no EOS token "
                          "(no </s>, and tokenizer.eos_token is not set)") in err


def test_the_packer_names_the_folder(tmp_path: Path) -> None:
    from langadapt.data.encoders import load_tokenizer_info

    base = base_without_eos(tmp_path / "base")
    with pytest.raises(LangadaptError, match=f"tokenizer {base}: no EOS token; the token files put one"):
        load_tokenizer_info(base)
