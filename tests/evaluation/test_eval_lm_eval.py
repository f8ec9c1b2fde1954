"""The lm-eval bridge: local custom task YAMLs over local JSON files, run on the in-memory model.

No network: the tasks are written into tmp_path, datasets is forced offline, and lm-eval's
built-in task index is not loaded. Both tasks are constructed so that lm-eval must reproduce
numbers we compute ourselves on the same model in the same run.
"""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from langadapt.evaluation import EvaluationConfig, evaluate_models, load_suite
from langadapt.evaluation.suite import REPO_ROOT
from langadapt.evaluation.task_data import read_minimal_pairs

pytest.importorskip("lm_eval")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_lm_eval_tasks_from_a_local_include_path_match_our_own_scores(
    tmp_path, monkeypatch, tiny_en_llama, shared_texts
):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    pairs = read_minimal_pairs(REPO_ROOT / "eval" / "data" / "nb_minimal_pairs.jsonl")
    pairs_json = tmp_path / "pairs.jsonl"
    pairs_json.write_text(
        "".join(json.dumps({"good": g, "bad": b}, ensure_ascii=False) + "\n" for g, b in pairs), "utf-8"
    )
    docs = [t[:700] for t in shared_texts("nn.gimp-help.valid", 3)]
    docs_json = tmp_path / "docs.jsonl"
    docs_json.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in docs), "utf-8")
    tasks = tmp_path / "lm_eval_tasks"
    tasks.mkdir()
    cache = tmp_path / "hf_cache"
    common = f"dataset_path: json\ntest_split: test\ndataset_kwargs:\n  cache_dir: {cache}\n  data_files:\n"
    # NCB-style multiple choice with an empty context and no delimiter: lm-eval scores BOS + sentence,
    # exactly what our minimal_pairs task does, so its acc must equal our accuracy.
    (tasks / "pairs.yaml").write_text(
        f"task: local_nb_pairs\n{common}    test: {pairs_json}\noutput_type: multiple_choice\n"
        "doc_to_text: ''\ntarget_delimiter: ''\ndoc_to_target: 0\ndoc_to_choice: '{{[good, bad]}}'\n"
        "metric_list:\n  - metric: acc\n",
        "utf-8",
    )
    (tasks / "rolling.yaml").write_text(
        f"task: local_nn_bpb\n{common}    test: {docs_json}\noutput_type: loglikelihood_rolling\n"
        "doc_to_text: ''\ndoc_to_target: '{{text}}'\nmetric_list:\n  - metric: bits_per_byte\n",
        "utf-8",
    )
    suite = tmp_path / "bridge.yaml"
    suite.write_text(
        "name: bridge\ntasks:\n"
        f"  - {{kind: minimal_pairs, name: ours, lang: nb, path: {pairs_json}}}\n"
        f"  - {{kind: bpb, files: {{nn_local: [{docs_json}]}}}}\n"
        f"  - kind: lm_eval\n    name: harness\n    tasks: [local_nb_pairs, local_nn_bpb]\n"
        f"    include_path: {tasks}\n    include_defaults: false\n",
        "utf-8",
    )
    model = AutoModelForCausalLM.from_pretrained(tiny_en_llama).eval()
    tok = AutoTokenizer.from_pretrained(tiny_en_llama)
    config = EvaluationConfig(window=64, batch_size=4, max_bytes_per_lang=None)  # 64: several windows per doc

    results = evaluate_models({"tiny": (model, tok)}, [load_suite(suite)], {}, config)

    harness = results["tasks"]["bridge/harness"]["tiny"]
    assert set(harness) == {"local_nb_pairs", "local_nn_bpb"}
    ours = results["tasks"]["bridge/ours"]["tiny"]["accuracy"]
    assert harness["local_nb_pairs"]["acc"] == pytest.approx(ours, abs=1e-9)
    # lm-eval's acc_stderr (left out by bootstrap_iters=0) is computed as ours is, over the same pairs
    assert harness["local_nb_pairs"]["acc_stderr"] == pytest.approx(
        results["tasks"]["bridge/ours"]["tiny"]["accuracy_stderr"], abs=1e-9)
    assert harness["local_nn_bpb"]["bits_per_byte"] == pytest.approx(
        results["models"]["tiny"]["nn_local"]["bits_per_byte"], abs=1e-4
    )
