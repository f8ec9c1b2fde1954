"""The packed stream: even interleaving, a fresh permutation per pass, exact O(1) resume."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.shards import BASE, make_shards

from langadapt.data.stream import StreamMismatch, build_stream
from langadapt.errors import LangadaptError

REPO = Path(__file__).resolve().parents[2]


def _locate(row: np.ndarray, seq_len: int) -> tuple[int, int]:
    """(source index, chunk) of a sample, checking it is one contiguous window."""
    source, start = divmod(int(row[0]), BASE)
    assert np.array_equal(row, row[0] + np.arange(seq_len + 1))
    assert start % seq_len == 0
    return source, start // seq_len


def test_very_different_sizes_interleave_within_one_sample_at_every_prefix(tmp_path: Path) -> None:
    shards = make_shards(tmp_path, {"big": 400_001, "mid": 8_001, "tiny": 161})
    stream = build_stream(shards, {"big": {"weight": 1000}, "mid": {"weight": 30}, "tiny": {"epochs": 2}}, 8, 30_000, 0)
    targets = stream.state_dict()["targets"]
    assert targets["tiny"] == 40 and sum(targets.values()) == 30_000
    ideal = np.array([targets[n] for n in stream.source_names], dtype=np.float64) / 30_000
    counts = np.zeros(3)
    worst = 0.0
    for t in range(1, 30_001):
        counts[stream.next_source()] += 1
        worst = max(worst, float(np.abs(counts - t * ideal).max()))
    assert worst < 1.0
    assert counts.tolist() == [targets[n] for n in stream.source_names]


def test_every_pass_is_a_fresh_permutation_of_all_chunks(tmp_path: Path) -> None:
    shards = make_shards(tmp_path, {"a": 8 * 50 + 1, "b": 8 * 7 + 1})
    stream = build_stream(shards, {"a": {"epochs": 3}, "b": {"epochs": 6}}, 8, 3 * 50 + 6 * 7, seed=3)
    rows = stream.next_batch(3 * 50 + 6 * 7)
    by_source: dict[int, list[int]] = {0: [], 1: []}
    for row in rows:
        source, chunk = _locate(row, 8)
        by_source[source].append(chunk)
    for source, chunks in ((0, 50), (1, 7)):
        passes = [by_source[source][i : i + chunks] for i in range(0, len(by_source[source]), chunks)]
        assert all(sorted(p) == list(range(chunks)) for p in passes)
        assert len({tuple(p) for p in passes}) == len(passes)  # a new order every pass


def test_deterministic_and_independent_of_world_size(tmp_path: Path) -> None:
    shards = make_shards(tmp_path, {"a": 5_001, "b": 3_001})
    one = build_stream(shards, None, 16, 1_000, seed=7)
    again = build_stream(shards, None, 16, 1_000, seed=7)
    ranks = [build_stream(shards, None, 16, 1_000, seed=7) for _ in range(4)]
    other = build_stream(shards, None, 16, 1_000, seed=8)
    for _ in range(5):
        batch = one.next_batch(32)
        assert np.array_equal(batch, again.next_batch(32))
        assert np.array_equal(batch, np.concatenate([s.next_batch(32, rank=r, world_size=4) for r, s in enumerate(ranks)]))
        assert not np.array_equal(batch, other.next_batch(32))
    assert batch.dtype == np.int64 and batch.shape == (32, 17)
    # None = natural proportions: both sources are repeated (nearly) equally often.
    epochs = [s.epochs for s in one.plan.sources]
    assert epochs[0] == pytest.approx(epochs[1], rel=0.01)


def test_resume_in_a_new_process_continues_exactly(tmp_path: Path) -> None:
    shards = make_shards(tmp_path / "tokens", {"nb": 20_001, "en": 50_001, "code": 3_001})
    mixture = {"nb": {"epochs": 4}, "en": {"weight": 1}, "code": {"weight": 0.5}}
    stream = build_stream(shards, mixture, 32, 6_000, seed=11)
    for _ in range(37):
        stream.next_batch(24)
    state_file = tmp_path / "state.json"
    state_file.write_text(json.dumps(stream.state_dict()))
    expected = stream.next_batch(1_000)
    script = (
        "import json, sys, numpy as np\n"
        "from langadapt.data.stream import build_stream\n"
        f"s = build_stream({str(shards)!r}, {mixture!r}, 32, 6_000, seed=11)\n"
        f"s.load_state_dict(json.load(open({str(state_file)!r})))\n"
        f"np.save({str(tmp_path / 'next.npy')!r}, s.next_batch(1_000))\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=REPO, timeout=60)
    assert np.array_equal(np.load(tmp_path / "next.npy"), expected)
    assert json.loads(state_file.read_text())["samples"] == 37 * 24


def test_restore_cost_is_the_same_at_sample_10_and_10_million(tmp_path: Path) -> None:
    shards = make_shards(tmp_path, {"nb": 64 * 1_000 + 1})
    stream = build_stream(shards, {"nb": {"weight": 1}}, 64, 20_000_000, seed=1, force=True)

    def restore_and_read(position: int) -> float:
        """A real resume: open the stream afresh, restore, read the next sample."""
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            resumed = build_stream(shards, {"nb": {"weight": 1}}, 64, 20_000_000, seed=1, force=True)
            resumed.load_state_dict({**stream.state_dict(), "samples": position, "counts": {"nb": position}})
            resumed.next_batch(1)
            best = min(best, time.perf_counter() - start)
        return best

    restore_and_read(10)  # warm caches
    small, large = restore_and_read(10), restore_and_read(10_000_000)
    assert large < 3 * small + 0.01
    first_of_epoch = stream
    first_of_epoch.load_state_dict({**stream.state_dict(), "samples": 10_000, "counts": {"nb": 10_000}})
    chunks = {_locate(row, 64)[1] for row in first_of_epoch.next_batch(1_000)}
    assert chunks == set(range(1_000))  # sample 10,000 starts pass 11: all chunks once


def test_bad_mixtures_and_states(tmp_path: Path) -> None:
    shards = make_shards(tmp_path, {"nb": 1_001, "en": 100_001})
    with pytest.raises(LangadaptError, match=r"stream: source sv has no shards in .* \(found: en, nb\)"):
        build_stream(shards, {"sv": {"weight": 1}}, 10, 100, 0)
    with pytest.raises(LangadaptError, match=r"source nb: 50\.0 epochs is above 16"):
        build_stream(shards, {"nb": {"epochs": 50}, "en": {"weight": 1}}, 10, 6_000, 0)
    with pytest.raises(LangadaptError, match="weights of sources en, nb sum to zero"):
        build_stream(shards, {"nb": {"weight": 0}, "en": {"weight": 0}}, 10, 100, 0)
    with pytest.raises(LangadaptError, match="source nb has 1001 tokens, fewer than one sample of 2049"):
        build_stream(shards, None, 2048, 10, 0)
    stream = build_stream(shards, None, 10, 1_000, 0)
    with pytest.raises(LangadaptError, match="not divisible by world size 3"):
        stream.next_batch(8, rank=0, world_size=3)
    with pytest.raises(LangadaptError, match="stream state does not match this stream: seed is 5"):
        stream.load_state_dict({**stream.state_dict(), "seed": 5})


def test_a_state_of_another_length_says_the_global_batch_changed(tmp_path: Path) -> None:
    """A resume on another world size (the global batch unset) plans another number of samples:
    the line names that cause and the fix, not the per-source targets."""
    shards = make_shards(tmp_path, {"nb": 10_001, "en": 20_001})
    saved = build_stream(shards, None, 10, 800, 0).state_dict()  # e.g. 100 steps x 8 sequences
    with pytest.raises(StreamMismatch) as caught:
        build_stream(shards, None, 10, 1_600, 0).load_state_dict(saved)  # 100 steps x 16
    assert (caught.value.saved_samples, caught.value.samples) == (800, 1_600)
    line = str(caught.value)
    assert "targets" not in line and "{" not in line and "\n" not in line
    assert line.startswith("stream state does not match this stream: it was saved for 800 samples, this stream "
                           "plans 1,600: the global batch changed")
    assert "resume on the world size it was saved with, or set the stage's global_batch_size" in line


def test_position_ids_restart_after_each_document(tmp_path: Path) -> None:
    stream = build_stream(make_shards(tmp_path, {"a": 101}), None, 6, 10, 0, document_masking=True)
    batch = torch.tensor([[5, 6, 0, 7, 8, 0, 9], [0, 1, 2, 3, 4, 5, 6]])  # EOS id is 0 in make_shards
    assert stream.position_ids(batch).tolist() == [[0, 1, 2, 0, 1, 2, 0], [0, 0, 1, 2, 3, 4, 5]]


def test_trained_sources_and_progress_come_from_the_position_not_the_checkpoint(tmp_path: Path) -> None:
    """A weight-0 source is in the mixture but never drawn: not trained, not in the progress. The
    progress counts seq_len tokens a sample and passes over a source's planned samples."""
    from helpers.synthetic import SyntheticStream

    from langadapt.data.stream import TokenStream

    shards = make_shards(tmp_path, {"a": 8 * 50 + 1, "b": 8 * 20 + 1, "eval_only": 8 * 5 + 1})
    stream = build_stream(shards, {"a": {"epochs": 2}, "b": {"epochs": 1}, "eval_only": {"weight": 0}}, 8, 120, seed=0)
    assert stream.trained_sources() == ["a", "b"]
    assert stream.progress() == ({"a": 0, "b": 0}, {"a": 0.0, "b": 0.0})
    stream.next_batch(60)  # half of the plan: 50 of a's 100 samples, 10 of b's 20
    tokens, epochs = stream.progress()
    assert tokens == {"a": 50 * 8, "b": 10 * 8}
    assert epochs == pytest.approx({"a": 1.0, "b": 0.5})
    # every stream the loop is given answers the protocol's questions, not only PackedStream
    members = [name for name in vars(TokenStream) if not name.startswith("_")]
    assert {"trained_sources", "progress"} <= set(members)
    for cls in (type(stream), SyntheticStream):
        assert all(callable(getattr(cls, name, None)) for name in members), cls
