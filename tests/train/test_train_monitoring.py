"""Watching a run: held-out validation during training, the progress line (elapsed, ETA, tokens
per source) and the rows behind it."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers.synthetic import SyntheticStream, tiny_llama

from langadapt.data.stream import build_stream
from langadapt.errors import LangadaptError
from langadapt.recipe.train import EngineConfig, OptimizerConfig, TrainStageConfig, ValidationConfig
from langadapt.train.fastpath import CausalLMLoss
from langadapt.train.job import TrainingJob
from langadapt.train.loop import fit
from langadapt.train.monitoring.defaults import default_callbacks
from langadapt.train.monitoring.validation import HeldOutSet, Validation, load_held_out

VOCAB, SEQ = 128, 16


def write_shard(folder: Path, tokens: np.ndarray, lang: str, eos_id: int = 0) -> None:
    """A token shard as langadapt.data.shards writes one (tokens.bin + meta.json)."""
    folder.mkdir(parents=True)
    tokens.astype(np.uint16).tofile(folder / "tokens.bin")
    meta = {"source": folder.name, "lang": lang, "role": "target", "dtype": "uint16",
            "num_tokens": int(tokens.size), "num_docs": 1, "eos_id": eos_id, "vocab_size": VOCAB}
    (folder / "meta.json").write_text(json.dumps(meta))


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def two_bytes_per_token(ids: list[int]) -> str:
    return "é" * len(ids)  # 2 UTF-8 bytes each


def stage(steps: int, every: int | None, **overrides) -> TrainStageConfig:
    fields = dict(steps=steps, micro_batch_size=4, seq_len=SEQ, log_every=2,
                  optimizer=OptimizerConfig(lr=1e-2), validation=ValidationConfig(every_steps=every))
    fields.update(overrides)
    return TrainStageConfig(**fields)


def synthetic_sets(tmp_path: Path) -> list[HeldOutSet]:
    held = SyntheticStream(VOCAB, 4 * SEQ, seed=7)  # learnable like the training rows, other rows
    write_shard(tmp_path / "valid" / "xx.src", np.concatenate([held.row(i) for i in range(6)]), "xx")
    return load_held_out(tmp_path / "valid", None, None, SEQ, 10 * SEQ, two_bytes_per_token)


def test_validation_scores_the_same_windows_as_the_models_own_forward(tmp_path: Path) -> None:
    sets = synthetic_sets(tmp_path)
    config = stage(8, every=3)
    out = tmp_path / "run" / "stage2"
    fit(tiny_llama(VOCAB), SyntheticStream(VOCAB, SEQ),
        TrainingJob.resolve(config, EngineConfig(), out, seed=0), callbacks=default_callbacks(config, out, "run/stage2"),
        validation=Validation(sets, config.validation, micro_batch_size=3))
    valid = [r for r in rows(out) if "valid" in r]
    assert [r["step"] for r in valid] == [3, 6, 8]  # every 3 steps and the last
    assert valid[-1]["valid"]["xx"]["loss"] < valid[0]["valid"]["xx"]["loss"]  # it learns the progressions
    # The exported final model, scored with full logits: the chunked-head validation agrees.
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(out / "model").eval()
    windows = torch.from_numpy(sets[0].windows)
    with torch.no_grad():
        logits = model(input_ids=windows[:, :-1]).logits
    nll = F.cross_entropy(logits.flatten(0, 1), windows[:, 1:].flatten(), reduction="sum").item()
    last = valid[-1]["valid"]["xx"]
    assert last["tokens"] == windows[:, 1:].numel() == 10 * SEQ
    assert last["loss"] == pytest.approx(nll / last["tokens"], rel=1e-5)
    assert last["bits_per_byte"] == pytest.approx(nll / (2 * last["tokens"]) / math.log(2), rel=1e-5)
    train = [r for r in rows(out) if "loss" in r]
    assert [r["step"] for r in train] == [2, 4, 6, 8]  # validation rows do not displace train rows


def test_held_out_windows_are_a_fixed_spread_per_language(tmp_path: Path) -> None:
    a, b, c = np.arange(200) % VOCAB, (np.arange(90) * 3) % VOCAB, np.arange(120) % 7
    write_shard(tmp_path / "nb.one", a, "nb")
    write_shard(tmp_path / "nb.two", b, "nb")
    write_shard(tmp_path / "en.one", c, "en")
    write_shard(tmp_path / "en.tiny", np.arange(SEQ), "en")  # shorter than one window: skipped
    sets = {s.lang: s for s in load_held_out(tmp_path, None, None, SEQ, 4 * SEQ, two_bytes_per_token)}
    assert list(sets) == ["en", "nb"]
    nb = sets["nb"].windows
    assert nb.shape == (4, SEQ + 1)  # 2 windows from each of its two sources
    assert (nb[0] == a[: SEQ + 1]).all() and (nb[1] == a[11 * SEQ : 12 * SEQ + 1]).all()  # first and last chunk
    assert (nb[2] == b[: SEQ + 1]).all() and (nb[3] == b[4 * SEQ : 5 * SEQ + 1]).all()
    assert sets["nb"].target_bytes == 2 * 4 * SEQ
    assert len(sets["en"].windows) == 4  # all from en.one (en.tiny too short), 4 of its 7 chunks
    only_trained = load_held_out(tmp_path, ["nb.one"], None, SEQ, 4 * SEQ, two_bytes_per_token)
    assert [s.lang for s in only_trained] == ["nb"] and len(only_trained[0].windows) == 4
    with pytest.raises(LangadaptError, match="validation.langs: no usable held-out shards for fi"):
        load_held_out(tmp_path, None, ["nb", "fi"], SEQ, 4 * SEQ, two_bytes_per_token)


class OneRankEngine:
    """An engine of one rank of a larger job: all_reduce_sum hands back the local sums (recorded)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model, self.device, self.sent = model, torch.device("cpu"), []
        self.forward_model = CausalLMLoss(model, fused=False)

    def all_reduce_sum(self, values: list[float]) -> list[float]:
        self.sent.append(values)
        return values


def test_ranks_score_disjoint_shares_padded_to_the_same_number_of_passes(tmp_path: Path) -> None:
    sets = synthetic_sets(tmp_path)  # 10 windows over 3 ranks: 4, 3, 3 real rows
    model = tiny_llama(VOCAB)
    alone = Validation(sets, ValidationConfig(every_steps=1), 2).run(OneRankEngine(model))["valid"]["xx"]
    calls, sums = [], np.zeros(2)
    forward = model.model.forward
    for rank in range(3):
        engine = OneRankEngine(model)
        count = []
        model.model.forward = lambda *a, _count=count, **k: (_count.append(1), forward(*a, **k))[1]
        Validation(sets, ValidationConfig(every_steps=1), 2, rank=rank, world_size=3).run(engine)
        calls.append(len(count))
        sums += engine.sent[0]
    assert calls == [2, 2, 2]  # ZeRO-3 needs the same collective forward passes on every rank
    assert sums[1] == 10 * SEQ  # every real target once, padding never
    assert sums[0] / sums[1] == pytest.approx(alone["loss"], rel=1e-6)


def test_no_held_out_data_for_an_enabled_validation_is_a_one_line_error(tmp_path: Path, tiny_en_llama: Path) -> None:
    from langadapt.run.context import StageContext
    from langadapt.runtime.distributed import DistInfo
    from langadapt.train.job import TrainingJob
    from langadapt.train.stage import build_validation

    def job(every: int | None) -> TrainingJob:  # no held-out window is decoded: any tokenizer object will do
        return TrainingJob.resolve(stage(4, every=every), EngineConfig(), tmp_path / "stage2", seed=0,
                                   stage_name="stage2", dist=DistInfo(), tokenizer=tiny_en_llama)

    ctx = StageContext(run_dir=tmp_path, stage="stage2", seed=0)
    with pytest.raises(LangadaptError, match=r"stage2.validation.every_steps: no held-out shards .*valid_fraction"):
        build_validation(job(2), ctx, ["nb.src"])
    assert build_validation(job(None), ctx, []) is None


def test_progress_line_and_rows_carry_elapsed_eta_and_tokens_per_source(tmp_path: Path, caplog) -> None:
    tokens = tmp_path / "tokens"
    write_shard(tokens / "nb.src", np.arange(40 * SEQ + 1) % VOCAB, "nb")  # 40 chunks
    write_shard(tokens / "en.src", (np.arange(200 * SEQ + 1) * 5) % VOCAB, "en")
    config = stage(6, every=None)
    stream = build_stream(tokens, {"nb.src": {"weight": 0.75}, "en.src": {"weight": 0.25}}, SEQ, 6 * 4, seed=0)
    with caplog.at_level(logging.INFO, logger="langadapt.train"):
        fit(tiny_llama(VOCAB), stream,
            TrainingJob.resolve(config, EngineConfig(), tmp_path / "run" / "stage2", seed=0))
    logged = rows(tmp_path / "run" / "stage2")
    for row in logged:
        assert sum(row["tokens_by_source"].values()) == row["tokens"]
        assert row["elapsed_seconds"] > 0
    assert logged[-1]["tokens_by_source"] == {"nb.src": 18 * SEQ, "en.src": 6 * SEQ}
    assert logged[-1]["epochs_by_source"]["nb.src"] == pytest.approx(18 / 40, rel=1e-2)  # samples / chunks
    assert logged[-1]["eta_seconds"] == 0 and logged[0]["eta_seconds"] > 0
    assert [r["elapsed_seconds"] for r in logged] == sorted(r["elapsed_seconds"] for r in logged)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step ")]
    assert len(lines) == 3
    assert "elapsed 0:00:" in lines[-1] and "eta 0:00:00" in lines[-1]
    assert f"nb.src {18 * SEQ}" in lines[-1] and "(0.45 ep)" in lines[-1]
