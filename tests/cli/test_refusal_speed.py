"""Every refusal of `langadapt eval` and `langadapt export` comes before torch and transformers load (issue 32 item 4).

Importing them costs 2-3 s of CPU; a missing suite or a typo in --texts must not. Each refusal
runs in a fresh interpreter (an in-process run would find torch already imported by other tests)
that reports, after `cli.main` returns, its exit status and whether torch or transformers were
imported. Not its CPU time: issue 32's goal (under 1 s; the refusals measure 0.3-0.5 s quiet) is a
speed, and a timed assertion on a shared 2-core machine measures the neighbours (1.02 s once, with
a benchmark beside it); what makes a refusal fast, never loading torch, is asserted exactly.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.model_folders import header_model

from langadapt.evaluation.naming import RESULTS
from langadapt.run.layout import RunLayout
from langadapt.run.lock import RunLock

PROBE = """
import json, sys
from langadapt import cli
rc = cli.main(sys.argv[1:])
print(json.dumps({"rc": rc, "heavy": sorted(m for m in ("torch", "transformers") if m in sys.modules)}))
"""


def _refuse(argv: list[str], cwd: Path) -> tuple[str, dict]:
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return done.stderr.strip(), report


@pytest.fixture
def folders(tmp_path: Path) -> dict[str, Path]:
    """A model folder (only its config.json: nothing may load it), an empty folder, a finished
    run (a stage's model folder beside its recipe), a run with nothing trained, bad texts."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}", "utf-8")
    run = RunLayout(tmp_path / "runs" / "demo")
    run.trained("stage2").model.mkdir(parents=True)
    (run.trained("stage2").model / "config.json").write_text("{}", "utf-8")
    run.resolved_recipe.write_text("name: demo\n", "utf-8")
    untrained = RunLayout(tmp_path / "runs" / "fresh")
    untrained.root.mkdir(parents=True)
    untrained.resolved_recipe.write_text("name: fresh\n", "utf-8")
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.jsonl").write_text('{"text": "a"}\n{oops\n', "utf-8")
    (tmp_path / "bpb_only.yaml").write_text(  # scores nothing where no held-out text is found
        "name: bpb_only\ntasks:\n  - {kind: bpb, langs: [nb]}\n", "utf-8")
    done = tmp_path / "done"
    done.mkdir()
    (done / RESULTS).write_text("{}", "utf-8")
    (tmp_path / "fresh.yaml").write_text(  # the recipe of the run with nothing trained, for `export`
        f"name: fresh\nrun_root: {tmp_path}/runs\ninit: scratch\nbase_model:\n  architecture: {{model_type: llama}}\n"
        "data:\n  sources:\n    - {name: nb, path: nb.jsonl, lang: nb}\ntokenizer: {kind: byte_bpe, vocab_size: 300}\n")
    return {"model": model, "run": run.root, "fresh": untrained.root, "tmp": tmp_path,
            **_issue_38_folders(tmp_path)}


def _issue_38_folders(tmp_path: Path) -> dict[str, Path]:
    """Model folders that load only as far as transformers' size check or tokenizer search (issue 38),
    lm-eval task folders with a missing data file or a broken YAML, and trained runs to export."""
    (tmp_path / "nb.txt").write_text("Dette er en tekst på norsk.\n", "utf-8")
    good = header_model(tmp_path / "good")
    header_model(tmp_path / "mismatch", vocab_size=80)
    header_model(tmp_path / "notok", tokenizer_ids=None)
    truncated = header_model(tmp_path / "truncated")
    weights = (truncated / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(weights[:-100])
    for name, task_yaml in (("nodata", "task: t\ndataset_path: json\ndataset_kwargs:\n  data_files: {test: gone.jsonl}\n"),
                            ("badyaml", "task: t\ndataset_path: json\ndataset_kwargs:\n  data_files: [a.jsonl\n")):
        (tmp_path / name / "tasks").mkdir(parents=True)
        (tmp_path / name / "tasks" / "t.yaml").write_text(task_yaml, "utf-8")
        (tmp_path / name / "suite.yaml").write_text(
            "name: s\ntasks:\n  - {kind: lm_eval, tasks: [t], include_path: tasks, include_defaults: false}\n", "utf-8")
    (tmp_path / "trained.yaml").write_text(  # a trained run whose base no longer agrees with its weights
        f"name: trained\nrun_root: {tmp_path}/runs\ninit: warm\nbase_model: {{path: {tmp_path}/mismatch}}\n"
        "data:\n  sources:\n    - {name: nb, path: nb.txt, lang: nb}\ntokenizer: {vocab_size: 300}\n", "utf-8")
    (tmp_path / "pairs.jsonl").write_text('{"nb": "Hei.", "en": ""}\n', "utf-8")  # read at preflight
    (tmp_path / "tr_suite.yaml").write_text(
        f"tasks:\n  - {{kind: translation, name: tr, path: {tmp_path}/pairs.jsonl, directions: [nb-en], num_fewshot: 0}}\n")
    (tmp_path / "pairs_run.yaml").write_text(
        f"name: pairs\nrun_root: {tmp_path}/runs\ninit: warm\nbase_model: {{path: {tmp_path}/good}}\n"
        "data:\n  sources:\n    - {name: nb, path: nb.txt, lang: nb}\ntokenizer: {kind: keep_base}\nstage1: {seq_len: 64}\n"
        f"evaluation: {{suites: [{tmp_path}/tr_suite.yaml]}}\n", "utf-8")
    layout = RunLayout(tmp_path / "runs" / "trained")
    header_model(layout.stage2.model)
    (layout.stage2.root / "COMPLETE").write_text("done\n", "utf-8")
    return {"good": good}


CASES = {
    "missing suite": (["eval", "{model}", "--suite", "{tmp}/nosuch.yaml"], "nosuch.yaml: suite file not found"),
    "no such path": (["eval", "{tmp}/nothere"], "nothere: no such run directory or model folder"),
    "neither model nor run": (["eval", "{tmp}/empty"], "neither a Hugging Face model folder"),
    "run with nothing trained": (["eval", "{fresh}"], "a run directory with no trained model yet"),
    "bad --compare": (["eval", "{model}", "--compare", "ref={tmp}/empty"], "--compare ref="),
    "--texts without a file": (["eval", "{model}", "--texts", "nb"], "--texts nb: expected LANG=FILE"),
    "--texts missing file": (["eval", "{model}", "--texts", "nb={tmp}/none.txt"], "none.txt"),
    "--texts malformed JSON": (["eval", "{model}", "--texts", "nb={tmp}/bad.jsonl"], "--texts nb: invalid JSON at line 2"),
    "--out holds results": (["eval", "{model}", "--out", "{tmp}/done"], "already exists; pass --overwrite"),
    "--name for a run": (["eval", "{run}", "--name", "mine"], "--name mine: names a model folder"),
    "suite measures nothing": (["eval", "{model}", "--suite", "{tmp}/bpb_only.yaml"],
                               "would measure nothing: no held-out text for nb"),
    "export: malformed --checkpoint": (["export", "{tmp}/fresh.yaml", "--checkpoint", "last"], "expected STAGE/STEP"),
    "export: --revision alone": (["export", "{tmp}/fresh.yaml", "--revision", "v1"], "only used with --push-to-hub"),
    "export: nothing trained": (["export", "{tmp}/fresh.yaml"], "nothing trained to export"),
    # issue 38: what `run` refuses, `eval` and `export` refuse the same way
    "--texts a language name": (["eval", "{model}", "--texts", "Norwegian={tmp}/nb.txt"],
                                "--texts Norwegian={tmp}/nb.txt: 'Norwegian' is not a language code (ISO 639"),
    "--texts an unregistered code": (["eval", "{model}", "--texts", "xx={tmp}/nb.txt"], "'xx' is not a language code"),
    "model: vocab_size against the weights": (["eval", "{tmp}/mismatch", "--texts", "nb={tmp}/nb.txt"],
                                              ("mismatch/config.json has vocab_size 80 but the weights' "
                                               "model.embed_tokens.weight has 64 rows")),
    "model: no tokenizer files": (["eval", "{tmp}/notok", "--texts", "nb={tmp}/nb.txt"],
                                  "notok has no tokenizer files (tokenizer.json, tokenizer.model"),
    "a run's model without weights": (["eval", "{run}", "--texts", "nb={tmp}/nb.txt"],
                                      "stage2/model has no weights (model.safetensors or pytorch_model.bin)"),
    "--compare: weights cut short": (["eval", "{good}", "--compare", "ref={tmp}/truncated", "--texts", "nb={tmp}/nb.txt"],
                                     "--compare ref={tmp}/truncated: {tmp}/truncated/model.safetensors is truncated"),
    "lm-eval: a data file missing": (["eval", "{good}", "--suite", "{tmp}/nodata/suite.yaml"],
                                     ("nodata/suite.yaml:3: task #1 (lm_eval): lm-eval task 't' "
                                      "({tmp}/nodata/tasks/t.yaml) reads data file {tmp}/gone.jsonl, which is missing")),
    "lm-eval: a task YAML that does not parse": (["eval", "{good}", "--suite", "{tmp}/badyaml/suite.yaml"],
                                                 "lm-eval task file {tmp}/badyaml/tasks/t.yaml:5:1: not valid YAML"),
    "export: the base disagrees with its weights": (["export", "{tmp}/trained.yaml"],
                                                    "base_model.path: {tmp}/mismatch/config.json has vocab_size 80"),
    "run: a translation row with an empty side": (["run", "{tmp}/pairs_run.yaml"], "pairs.jsonl:1: en is empty"),
    "export --checkpoint: the same base": (["export", "{tmp}/trained.yaml", "--checkpoint", "stage2/5"],
                                           "base_model.path: {tmp}/mismatch/config.json has vocab_size 80"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_refusal_is_one_line_exit_2_before_torch(case: str, folders: dict[str, Path]) -> None:
    argv, expected = CASES[case]
    err, report = _refuse([part.format(**folders) for part in argv], folders["tmp"])
    expected = expected.format(**folders)
    assert report["rc"] == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("langadapt: error: ") and expected in err, err
    assert report["heavy"] == [], f"{case}: refused only after importing {report['heavy']}"


def test_a_locked_run_is_refused_before_torch(folders: dict[str, Path]) -> None:
    """`langadapt eval RUN` writes RUN/eval: while a `langadapt run` holds the run's lock, it waits for none."""
    lock = RunLock(RunLayout(folders["run"]).lock)
    lock.acquire()
    try:
        err, report = _refuse(["eval", str(folders["run"])], folders["tmp"])
    finally:
        lock.release()
    assert report["rc"] == 2 and len(err.splitlines()) == 1 and "lock" in err, err
    assert report["heavy"] == [], report
