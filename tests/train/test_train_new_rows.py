"""`train_rows: new` (langadapt.train.rows): rows copied from the base keep their values bit for bit
through a training stage, the new rows train; with `train_rows: all` the same rows do move, so
the checks can fail. The torch engine (untied and tied) in this process; DeepSpeed ZeRO-1, ZeRO-2
and FSDP2 on 2 ranks (torchrun, gloo) through tests/helpers/fit_worker.py, whose even rows play the
copied ones (so both ranks' FSDP shards hold shared and new rows). Also: the embeddings stage's
record of the copied rows, and the refusals where the option cannot apply.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import fit_worker
from helpers import multiproc as mp
from helpers.synthetic import SyntheticStream, tiny_llama

from langadapt.embeddings.row_plan import SharedRows
from langadapt.errors import LangadaptError
from langadapt.recipe import load_recipe
from langadapt.recipe.train import (
    EngineConfig,
    OptimizerConfig,
    ScheduleConfig,
    TrainStageConfig,
)
from langadapt.train.engines.base import build_optimizer
from langadapt.train.job import TrainingJob
from langadapt.train.loop import fit
from langadapt.train.policy import select_trainable

REPO = Path(__file__).resolve().parents[2]
VOCAB, SEQ, STEPS = fit_worker.VOCAB, 16, 4
SHARED = fit_worker.SHARED_ROWS
MATRICES = ("model.embed_tokens.weight", "lm_head.weight")


def shared_and_new(before: torch.Tensor, after: torch.Tensor) -> tuple[bool, int]:
    """(shared rows all bit-identical, number of new rows that changed)."""
    ids = torch.tensor(SHARED.ids)
    new = torch.ones(VOCAB, dtype=torch.bool)
    new[ids] = False
    changed = (before[new] != after[new]).any(dim=1)
    return torch.equal(before[ids], after[ids]), int(changed.sum())


def train_in_process(out: Path, train_rows: str, tied: bool = False) -> tuple[dict, dict]:
    """Stage 1 (embeddings + head) on the torch engine: the weights before and after."""
    model = tiny_llama(VOCAB, tie_word_embeddings=tied)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    config = TrainStageConfig(steps=STEPS, micro_batch_size=4, seq_len=SEQ, log_every=1, train_rows=train_rows,
                              optimizer=OptimizerConfig(lr=1e-2, weight_decay=0.1),
                              schedule=ScheduleConfig(warmup_steps=1))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fit(model, SyntheticStream(VOCAB, SEQ),
            TrainingJob.resolve(config, EngineConfig(), out, seed=0, stage_name="stage1",
                                shared_rows=SHARED if train_rows == "new" else None))
    finally:
        torch.set_num_threads(threads)
    return before, model.state_dict()


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_torch_engine_keeps_shared_rows_and_trains_new_ones(tied: bool, tmp_path: Path) -> None:
    before, after = train_in_process(tmp_path / "new", "new", tied)
    for name in MATRICES:
        kept, changed = shared_and_new(before[name], after[name])
        assert kept, name
        # of 48 new rows: every head row gets a gradient (measured 48); an input row only where its token
        # occurs in the 4 batches (measured 41 untied, 48 tied)
        assert changed >= (48 if name == "lm_head.weight" or tied else 30), (name, changed)
    if tied:
        assert after["lm_head.weight"].data_ptr() == after["model.embed_tokens.weight"].data_ptr()
    before, after = train_in_process(tmp_path / "all", "all", tied)  # shared rows moved up to 0.040
    assert all(not shared_and_new(before[name], after[name])[0] for name in MATRICES)


def test_new_rows_exempt_the_embedding_matrices_from_weight_decay() -> None:
    """A zero gradient alone would still let AdamW's decoupled decay shrink the shared rows."""
    model = tiny_llama(VOCAB)
    selection = select_trainable(model, TrainStageConfig().trainable_patterns("stage1"))
    for train_rows, decay in (("all", 0.1), ("new", 0.0)):
        stage = TrainStageConfig(train_rows=train_rows, optimizer=OptimizerConfig(weight_decay=0.1))
        groups = build_optimizer(selection, stage.optimizer_in_force, torch.device("cpu")).param_groups
        assert [g["weight_decay"] for g in groups] == [decay]


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """fit_worker's stage 1 in one plain process, torch engine: new rows (the reference the ranks
    must match) and all rows (the control: the same run moves the shared rows)."""
    runs = {}
    for rows in ("new", "all"):
        runs[rows] = tmp_path_factory.mktemp(rows) / "run"
        fit_worker.train(runs[rows], engine="torch", stage="stage1", steps=STEPS, train_rows=rows)
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("engine", [("deepspeed", "--zero", "1"), ("deepspeed", "--zero", "2"),
                                    ("deepspeed", "--zero", "3"), ("fsdp",)],
                         ids=["zero1", "zero2", "zero3", "fsdp"])  # ZeRO-1: the shipped recipes' stage 1
def test_two_ranks_keep_shared_rows(engine: tuple[str, ...], single: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "run"
    mp.two_ranks(out, "--engine", *engine, "--stage", "stage1", "--steps", str(STEPS), "--train-rows", "new")
    before, after = torch.load(out / "initial.pt"), mp.weights(out)
    for name in MATRICES:
        kept, changed = shared_and_new(before[name], after[name])
        assert kept, name
        assert changed == 48, (name, changed)  # 48 for both matrices measured with ZeRO-2 and FSDP2
    assert mp.max_weight_diff(after, mp.weights(single["new"])) <= mp.WEIGHT_ATOL  # measured 1.3e-8 (ZeRO-2, FSDP2)
    mp.assert_losses_close(mp.losses(out), mp.losses(single["new"]))
    control = mp.weights(single["all"])
    assert all(not shared_and_new(before[name], control[name])[0] for name in MATRICES)


def test_a_matrix_zero3_loaded_partitioned_is_checked_by_its_whole_shape() -> None:
    """Under ZeRO-3 the stage loads the weights partitioned: the module sees shape [0], and
    DeepSpeed records the whole matrix's in `ds_shape`."""
    from langadapt.train.rows import RowFreeze

    model = tiny_llama(VOCAB)
    selection = select_trainable(model, TrainStageConfig().trainable_patterns("stage1"))
    for param in model.parameters():
        param.ds_shape = param.shape
        param.data = torch.empty(0)
    assert RowFreeze.build(selection, "new", SHARED, "stage1") is not None
    wrong = SharedRows(VOCAB + 4, SHARED.ids)
    with pytest.raises(LangadaptError, match=r"embedding matrices have 96 rows and the embeddings stage recorded "
                                             r"shared rows of a 100-row matrix"):
        RowFreeze.build(selection, "new", wrong, "stage1")


def test_refusals_name_the_key(tmp_path: Path) -> None:
    recipe = REPO / "recipes" / "tiny_english_source.yaml"  # init: scratch
    with pytest.raises(LangadaptError, match=r"stage2\.train_rows: new: init: scratch copies no row"):
        load_recipe(recipe, ["stage2.train_rows=new"])
    with pytest.raises(LangadaptError, match=r"stage1\.train_rows: new: init: scratch"):
        load_recipe(recipe, ["stage1.train_rows=new"])
    warm = REPO / "recipes" / "tiny_norwegian_warm.yaml"
    assert load_recipe(warm, ["stage1.train_rows=new"]).recipe.stage2.train_rows == "all"  # not inherited
    with pytest.raises(LangadaptError, match=r"stage1\.optimizer\.decay_embeddings: .*true contradicts train_rows"):
        load_recipe(warm, ["stage1.train_rows=new", "stage1.optimizer.decay_embeddings=true"])
    config = TrainStageConfig(steps=1, micro_batch_size=1, seq_len=SEQ, train_rows="new")
    with pytest.raises(LangadaptError, match=r"stage1\.train_rows: new, but the embeddings stage recorded no"):
        fit(tiny_llama(VOCAB), SyntheticStream(VOCAB, SEQ),
            TrainingJob.resolve(config, EngineConfig(), tmp_path, seed=0, stage_name="stage1"))
    with pytest.raises(LangadaptError, match=r"stage1\.train_rows: new, but the model's embedding matrices have 96"):
        fit(tiny_llama(VOCAB), SyntheticStream(VOCAB, SEQ),
            TrainingJob.resolve(config, EngineConfig(), tmp_path, seed=0, stage_name="stage1",
                                shared_rows=SharedRows(128, (0,))))


@pytest.mark.slow
def test_bf16_zero1_keeps_shared_rows_through_deepspeeds_bf16_optimizer(tmp_path: Path) -> None:
    """Under bf16 ZeRO-1 runs DeepSpeed's BF16_Optimizer (fp32 gradient accumulation,
    deepspeed_json.FP32_GRADIENTS), which accumulates each gradient as the backward produces it:
    the row mask must act before that. The model is bf16 there, so the reference is the initial
    weights rounded to bf16: shared rows and the frozen body equal it bit for bit."""
    out = tmp_path / "run"
    mp.two_ranks(out, "--zero", "1", "--precision", "bf16", "--stage", "stage1", "--steps", str(STEPS),
                 "--train-rows", "new")
    before = {k: v.to(torch.bfloat16).float() for k, v in torch.load(out / "initial.pt").items()}
    after = mp.weights(out)
    for name in MATRICES:
        kept, changed = shared_and_new(before[name], after[name].float())
        assert kept and changed == 48, (name, changed)
    assert all(torch.equal(before[k], after[k].float()) for k in after if k not in MATRICES)
