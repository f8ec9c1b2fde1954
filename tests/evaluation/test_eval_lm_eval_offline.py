"""lm-eval with no Hub: the shipped local tasks run, and a Hub task is one line (exit 2) before any model loads.

Nothing here needs network. "The Hub is unreachable" is simulated twice over: HF_HUB_OFFLINE=1,
and a probe whose connection fails; the dataset caches point at empty folders, so a copy of a
NorEval dataset on the machine running the tests cannot make them pass by accident.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from helpers.synthetic import tiny_llama
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from langadapt import cli
from langadapt.errors import LangadaptError
from langadapt.evaluation import evaluate
from langadapt.evaluation.suite import REPO_ROOT, LmEvalTask

pytest.importorskip("lm_eval")

TEXT = "Dette er en kort tekst på norsk bokmål om Debian og pakker, og den er ikke lang. " * 3
NOREVAL = REPO_ROOT / "eval" / "noreval.yaml"
OFFLINE = REPO_ROOT / "eval" / "lm_eval_offline.yaml"


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory) -> Path:
    """A tiny random Llama with a byte-level tokenizer, saved like an export (no ../shared needed)."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.train_from_iterator([TEXT] * 5, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="</s>")
    folder = tmp_path_factory.mktemp("tiny") / "model"
    tiny_llama(len(tok), seed=1).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture
def no_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Empty dataset caches, and any model load is a failure (the refusal must come first)."""
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets_cache")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub_cache"))

    def no_load(*_args, **_kwargs):
        raise AssertionError("a model was loaded before the Hub dataset was checked")

    monkeypatch.setattr(evaluate, "load_model", no_load)


def _refusal(model_folder: Path, tmp_path: Path, capsys) -> tuple[str, float]:
    started = time.perf_counter()
    rc = cli.main(["eval", str(model_folder), "--suite", str(NOREVAL), "--out", str(tmp_path / "out")])
    elapsed = time.perf_counter() - started
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err, elapsed


def test_a_hub_task_offline_is_one_line_naming_the_dataset(model_folder, tmp_path, monkeypatch, no_hub, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    err, elapsed = _refusal(model_folder, tmp_path, capsys)
    assert "lm-eval task 'ncb' reads the Hub dataset hcfa/ncb" in err and "HF_HUB_OFFLINE is set" in err
    assert 'datasets.load_dataset("hcfa/ncb")' in err and "HF_HOME=DIR HF_HUB_OFFLINE=1" in err
    assert not (tmp_path / "out" / "results.json").exists()
    print(f"refused offline in {elapsed:.1f} s")  # index of lm-eval's built-in tasks included


def test_an_unreachable_hub_is_the_same_one_line(model_folder, tmp_path, monkeypatch, no_hub, capsys):
    from huggingface_hub import HfApi

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    probed = []

    def refused(self, repo_id, **_kwargs):
        probed.append(repo_id)
        raise ConnectionError("[Errno -2] Name or service not known")

    monkeypatch.setattr(HfApi, "dataset_info", refused)
    err, _ = _refusal(model_folder, tmp_path, capsys)
    assert "reads the Hub dataset hcfa/ncb" in err and "the Hugging Face Hub cannot be reached" in err
    assert probed == ["hcfa/ncb"]  # one probe, not one per dataset


def test_a_connection_lost_while_lm_eval_runs_is_one_line(model_folder, monkeypatch):
    """The Hub answered while planning and then went away: lm-eval's ConnectionError, not a traceback."""
    import lm_eval
    from lm_eval.tasks import TaskManager
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from langadapt.evaluation.lm_eval_bridge import run_lm_eval
    from langadapt.recipe.evaluation import EvaluationConfig

    def lost(**_kwargs):
        raise ConnectionError("Couldn't reach 'hcfa/ncb' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(lm_eval, "simple_evaluate", lost)
    task = LmEvalTask(kind="lm_eval", name="noreval", tasks=["ncb"])
    model, tok = AutoModelForCausalLM.from_pretrained(model_folder), AutoTokenizer.from_pretrained(model_folder)
    manager = TaskManager(include_path=str(REPO_ROOT / "eval" / "lm_eval_tasks"))
    with pytest.raises(LangadaptError) as caught:
        run_lm_eval(model, tok, task, EvaluationConfig(window=64, batch_size=2), manager)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("lm_eval task 'noreval': could not reach the Hugging Face Hub for hcfa/ncb")
    assert 'datasets.load_dataset("hcfa/ncb")' in message


def test_the_shipped_offline_suite_runs_through_langadapt_eval(model_folder, tmp_path, monkeypatch, capsys):
    """eval/lm_eval_offline.yaml with the Hub off: lm-eval's acc on the shipped minimal pairs, in
    results.json and the report, equal to langadapt's own minimal-pairs accuracy on the same file."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    ours = tmp_path / "ours.yaml"
    ours.write_text("name: ours\ntasks:\n" + "".join(
        f"  - {{kind: minimal_pairs, name: {lang}, lang: {lang}, path: {REPO_ROOT / 'eval' / 'data' / f'{lang}_minimal_pairs.jsonl'}}}\n"
        for lang in ("nb", "nn", "en")), "utf-8")
    out = tmp_path / "out"
    argv = ["eval", str(model_folder), "--name", "tiny", "--suite", str(OFFLINE), "--suite", str(ours), "--out", str(out)]
    assert cli.main(argv) == 0, capsys.readouterr().err

    results = json.loads((out / "results.json").read_text("utf-8"))
    harness = results["tasks"]["lm_eval_offline/minimal_pairs"]["tiny"]
    assert set(harness) == {"nb_minimal_pairs_mc", "nn_minimal_pairs_mc", "en_minimal_pairs_mc"}
    report = (out / "report.md").read_text("utf-8")
    for lang, pairs in (("nb", 24), ("nn", 20), ("en", 20)):
        acc = harness[f"{lang}_minimal_pairs_mc"]["acc"]
        assert 0.0 <= acc <= 1.0 and harness[f"{lang}_minimal_pairs_mc"]["sample_len"] == pairs
        assert acc == pytest.approx(results["tasks"][f"ours/{lang}"]["tiny"]["accuracy"], abs=1e-9)
        assert f"{lang}_minimal_pairs_mc" in report
