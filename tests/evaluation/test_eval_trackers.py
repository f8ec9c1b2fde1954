"""Task metrics reach the trackers (issue 38): minimal-pair accuracy with its stderr, chrF/BLEU per
direction and lm-eval's metrics go where bits per byte goes, under `eval/<model>/<suite>/<task>/`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.trackers import tensorboard_scalars

from langadapt.run.layout import MARKER, RunLayout
from langadapt.run.trackers import RUN_IDS, evaluation_scalars, log_evaluation

RESULTS = {
    "models": {"adapted": {"nb": {"bits_per_byte": 1.25}}, "base": {"nb": {"bits_per_byte": 2.5}}},
    "tasks": {
        "mono/pairs": {"kind": "minimal_pairs", "lang": "nb",
                       "adapted": {"accuracy": 0.75, "accuracy_stderr": 0.25, "pairs": 4},
                       "base": {"accuracy": 0.5, "accuracy_stderr": None, "pairs": 4}},
        "multi/translation": {"kind": "translation",
                              "adapted": {"nb-en": {"chrf": 12.5, "bleu": 1.5, "pairs": 3}}},
        "nor/lm": {"kind": "lm_eval", "adapted": {"ncb": {"acc": 0.625}}},
    },
}


def test_every_task_number_is_a_scalar_beside_bits_per_byte() -> None:
    assert evaluation_scalars(RESULTS) == {
        "eval/adapted/nb/bits_per_byte": 1.25, "eval/base/nb/bits_per_byte": 2.5,
        "eval/adapted/mono/pairs/accuracy": 0.75, "eval/adapted/mono/pairs/accuracy_stderr": 0.25,
        "eval/adapted/mono/pairs/pairs": 4.0,
        "eval/base/mono/pairs/accuracy": 0.5, "eval/base/mono/pairs/pairs": 4.0,  # a None stderr is left out
        "eval/adapted/multi/translation/nb-en/chrf": 12.5, "eval/adapted/multi/translation/nb-en/bleu": 1.5,
        "eval/adapted/multi/translation/nb-en/pairs": 3.0,
        "eval/adapted/nor/lm/ncb/acc": 0.625,
    }


def test_the_evaluate_stage_writes_them_to_tensorboard_at_the_last_training_step(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    layout = RunLayout(tmp_path / "run")
    stage2 = layout.stage_dir("stage2")
    stage2.mkdir(parents=True)
    (stage2 / MARKER).write_text("")
    (stage2 / RUN_IDS).write_text(json.dumps({"names": ["tensorboard"], "ids": {}, "last_step": 7}))
    assert log_evaluation(layout, RESULTS, layout.evaluate) == ["tensorboard"]
    written = tensorboard_scalars(layout.evaluate / "tensorboard")
    assert written == {(key, 7): pytest.approx(value) for key, value in evaluation_scalars(RESULTS).items()}
