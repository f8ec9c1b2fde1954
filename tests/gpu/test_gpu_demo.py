"""The demo recipe end to end on a GPU, with both engines, against the CPU run's numbers.

Runs `langadapt run recipes/tiny_norwegian_warm.yaml` from the repository root (as a user does)
under other run names: `gpu_torch` (torch engine, the GPU defaults: compile + fused loss) and
`gpu_deepspeed` (DeepSpeed ZeRO-3 for stage 2, downgraded to 2 for the frozen-body stage 1),
which is killed (SIGKILL) in the middle of stage 2 and started again: it must resume from its
latest complete checkpoint and finish. The corpora must be in corpora/build (run.sh says how).
Reference numbers: cpu_reference.json, the CPU demo's results.json (see RESULTS.md).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
RECIPE = "recipes/tiny_norwegian_warm.yaml"
CPU_REFERENCE = json.loads((Path(__file__).parent / "cpu_reference.json").read_text())
RELATIVE_TOLERANCE = 0.01
"""GPU vs CPU bits per byte. Both runs train the base model and both stages from the same seeds,
in another reduction order (and the GPU evaluates in bf16); measured on an H100 (RESULTS.md):
all 30 numbers of the warm models within 0.2%. The qualitative claims (gains, the informed init)
are exact."""
COLD_LANGS = ("nb",)
"""The cold twin is compared on the language it trains on only. Trained from random weights at
LR 4e-3 for 249 steps, it amplifies the reduction-order differences: on the H100 (2026-11-23) its
nb was within 0.9% of the CPU run (torch engine 2.146, ZeRO-3 2.150 vs 2.131) but sv, fi and nn,
never trained on, drifted by up to 2.7% (fi 6.136 vs 6.306)."""


def langadapt(*args: str, timeout: float = 1200) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "langadapt.cli", *args], cwd=REPO, capture_output=True, check=False,
                          text=True, timeout=timeout)


def _bpb(run: Path) -> dict[str, dict[str, float]]:
    models = json.loads((run / "evaluate" / "results.json").read_text())["models"]
    return {m: {lang: v["bits_per_byte"] for lang, v in per.items()} for m, per in models.items()}


def _needs_corpora() -> None:
    if not (REPO / "corpora" / "build" / "nb.debian-handbook.jsonl.gz").is_file():
        pytest.skip("corpora/build is missing and this machine may have no apt: build it with "
                    "`python corpora/build.py --all` where apt works and carry it (tests/gpu/run.sh)")


@pytest.fixture(scope="module")
def torch_run() -> Path:
    _needs_corpora()
    done = langadapt("run", RECIPE, "--set", "name=gpu_torch")
    assert done.returncode == 0, done.stderr[-4000:]
    return REPO / "runs" / "gpu_torch"


@pytest.fixture(scope="module")
def deepspeed_run() -> Path:
    _needs_corpora()
    run = REPO / "runs" / "gpu_deepspeed"
    args = ["run", RECIPE, "--set", "name=gpu_deepspeed", "--set", "engine.kind=deepspeed",
            "--set", "engine.zero_stage=3", "--set", "stage2.checkpoint.every_steps=10"]
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "langadapt.cli", *args], cwd=REPO, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    metrics = run / "stage2" / "metrics.jsonl"
    while proc.poll() is None and time.perf_counter() - start < 900:
        steps = [json.loads(x).get("step", 0) for x in metrics.read_text().splitlines()] if metrics.exists() else []
        if steps and max(steps) >= 30:  # a tiny model trains ~40 steps/s on a GPU: poll fast
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.01)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, f"not killed in stage 2: {proc.stderr.read()[-3000:]}"
    done = langadapt("run", *args[1:])
    assert done.returncode == 0, done.stderr[-4000:]
    return run


@pytest.mark.parametrize("engine", ["torch_run", "deepspeed_run"])
def test_demo_matches_the_cpu_run(engine: str, request: pytest.FixtureRequest) -> None:
    run = request.getfixturevalue(engine)
    bpb = _bpb(run)
    for model, per_lang in CPU_REFERENCE["models"].items():
        for lang, reference in per_lang.items():
            if model != "cold" or lang in COLD_LANGS:
                assert bpb[model][lang] == pytest.approx(reference, rel=RELATIVE_TOLERANCE), (model, lang)
    assert bpb["adapted"]["nb"] < bpb["stage1"]["nb"] < bpb["init"]["nb"] < bpb["base"]["nb"]
    # The claim: warm beats cold at equal FLOPs. The CPU demo measured 0.86x with its 4,096-token
    # tokenizer (2026-11-25) and 0.90x with the 8,192-token one it takes since 2026-11-26 (cold twins
    # catch up with a larger vocabulary: more text per token); 0.95 keeps the claim with room for the
    # GPU's reduction order.
    assert bpb["adapted"]["nb"] < 0.95 * bpb["cold"]["nb"]
    # No claim on init vs init_random: since init_random is transformers' resize default (2026-11-28) it
    # starts ahead of the mean init on the CPU demo (nb 2.796 vs 2.965; issue 40 measures why).
    summary = json.loads((run / "stage2" / "summary.json").read_text())
    assert summary["engine"] == ("torch" if engine == "torch_run" else "deepspeed")
    assert (run / "export" / "model" / "model.safetensors").is_file()


def test_zero3_stage2_resumed_after_the_kill(deepspeed_run: Path) -> None:
    summary = json.loads((deepspeed_run / "stage2" / "summary.json").read_text())
    assert summary["zero_stage"] == 3 and 10 <= summary["resumed_from_step"] < summary["steps"]
    steps = [json.loads(x)["step"] for x in (deepspeed_run / "stage2" / "metrics.jsonl").read_text().splitlines()
             if "loss" in json.loads(x)]
    assert steps == sorted(set(steps)) and steps[-1] == summary["steps"]  # no step logged twice


def test_eval_bits_per_byte_on_gpu_equals_cpu_in_fp32(torch_run: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from langadapt.evaluation import bits_per_byte

    folder = torch_run / "export" / "model"
    tokenizer = AutoTokenizer.from_pretrained(folder)
    texts = (REPO / "README.md").read_text().split("\n\n")[:40]
    scores = {}
    for device in ("cpu", "cuda"):
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).to(device).eval()
        scores[device] = bits_per_byte(model, tokenizer, texts, 256, 256, 8)["bits_per_byte"]
    assert abs(scores["cpu"] - scores["cuda"]) < 1e-4, scores

