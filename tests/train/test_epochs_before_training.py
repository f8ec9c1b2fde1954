"""The epoch cap on the REAL token counts is checked for every training stage before stage 1 trains
(issue 32 item 5): preflight counts epochs from the corpus' file size when the shards do not exist
yet, and a cap that only the real count crosses used to stop stage 2 after stage 1 had trained."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from helpers.cli import run_cli

from langadapt.data.shards import META, TOKENS, read_shards
from langadapt.data.stream import build_stream
from langadapt.errors import LangadaptError
from langadapt.recipe.data import MAX_EPOCHS
from langadapt.recipe.train import EngineConfig, TrainingSlice, TrainStageConfig
from langadapt.run.context import StageContext
from langadapt.run.layout import MARKER, RunLayout
from langadapt.train.stage import plan_epochs_on_shards, stream_budget

RECIPE = """\
name: capped
run_root: {root}/runs
base_model:
  path: {base}
data:
  sources:
    - {{name: nb, path: {corpus}, lang: nb}}
  valid_fraction: 0.02
tokenizer:
  vocab_size: 600
stage1:
  steps: 1
  seq_len: 64
  micro_batch_size: 2
stage2:
  steps: 12
  seq_len: 64
  micro_batch_size: 500
"""
"""Stage 2 draws 12 x 500 x 64 = 384,000 tokens. The corpus' 64 KB at preflight's floor of 1.5 bytes
per token are about 42,700 tokens (9.0 epochs: passes); the 600-token vocabulary trained on its 150
distinct words makes 18,447 real tokens of its training split (20.8 epochs: above the cap of 16)."""


def _corpus(path: Path) -> Path:
    rng = random.Random(0)
    words = ["".join(rng.choice("abdefghiklmnoprstuvyæøå") for _ in range(rng.randint(3, 7))) for _ in range(150)]
    rows = [{"text": " ".join(rng.choice(words) for _ in range(60))} for _ in range(160)]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return path


def test_a_cap_only_the_real_count_crosses_stops_the_run_before_stage1_trains(tmp_path: Path,
                                                                              tiny_en_llama: Path) -> None:
    corpus = _corpus(tmp_path / "nb.jsonl")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE.format(root=tmp_path, base=tiny_en_llama, corpus=corpus))
    assert run_cli("run", str(recipe), "--dry-run").returncode == 0  # the estimate passes

    result = run_cli("run", str(recipe), timeout=300)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("langadapt: error:")]
    assert len(lines) == 1, result.stderr
    layout = RunLayout(tmp_path / "runs" / "capped")
    for fragment in ("stage2.steps: source nb:", f"epochs is above {MAX_EPOCHS:g}", "data.force_epochs: true",
                     "add data", "or lower stage2.steps (12)", str(layout.tokenizer.tokens)):
        assert fragment in lines[0], lines[0]
    real = read_shards(layout.tokenizer.tokens)["nb"].num_tokens
    assert real * MAX_EPOCHS < 384_000 < corpus.stat().st_size / 1.5 * MAX_EPOCHS  # what the recipe is built on
    assert (layout.tokenizer.root / MARKER).is_file()
    assert not layout.stage1.root.exists() and not layout.stage1.model.exists()  # nothing trained
    assert not (layout.embeddings.root / MARKER).exists()  # stopped as soon as the counts existed

    forced = run_cli("run", str(recipe), "--dry-run", "--set", "data.force_epochs=true")
    assert forced.returncode == 0, forced.stderr


def _shards(tmp_path: Path, num_tokens: int) -> StageContext:
    """A run folder whose tokenizer stage wrote one source `nb` of `num_tokens` tokens."""
    ctx = StageContext(run_dir=tmp_path / "run", stage="stage1", seed=0)
    folder = ctx.layout.tokenizer.tokens / "nb"
    folder.mkdir(parents=True)
    (folder / TOKENS).write_bytes(bytes(2 * num_tokens))
    meta = {"dtype": "uint16", "num_tokens": num_tokens, "num_docs": 1, "eos_id": 0}
    (folder / META).write_text(json.dumps(meta))
    return ctx


@pytest.mark.parametrize("steps, refused", [(16, False), (17, True)])
def test_check_epochs_refuses_exactly_what_the_training_stream_refuses(tmp_path: Path, steps: int,
                                                                        refused: bool) -> None:
    """6,401 tokens are 100 chunks of 64: a global batch of 100 samples is one epoch per step."""
    ctx = _shards(tmp_path, 6_401)
    job = TrainingSlice("stage2", TrainStageConfig(steps=steps, seq_len=64, micro_batch_size=100),
                        EngineConfig(), {"nb": {"weight": 1.0}})
    mixture, samples = stream_budget(job, 100)
    outcomes = []
    for attempt in (lambda: plan_epochs_on_shards(job, ctx),
                    lambda: build_stream(ctx.layout.tokenizer.tokens, mixture, 64, samples, seed=0)):
        try:
            attempt()
            outcomes.append(None)
        except LangadaptError as exc:
            outcomes.append(str(exc))
    assert [outcome is not None for outcome in outcomes] == [refused, refused]
    if refused:
        assert outcomes[0].startswith(f"stage2.steps: {outcomes[1]}; or lower stage2.steps (17)")
        assert "source nb: 17.0 epochs is above 16" in outcomes[0]
    disabled = TrainingSlice("stage2", TrainStageConfig(steps=1000, seq_len=64, enabled=False), EngineConfig())
    plan_epochs_on_shards(disabled, ctx)  # a stage that will not run plans nothing
