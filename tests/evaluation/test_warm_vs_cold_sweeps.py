"""The warm-vs-cold plan's override order, the epochs sweep's data split and its pass counts.

No training: recipes resolved from the plan, the data stage on a small synthetic corpus, and the
benchmark's reading of a stage's metrics rows.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from helpers.benchmarks import load_benchmark

from langadapt.data.documents import iter_split, texts_by_lang
from langadapt.data.stage import run as run_data_stage
from langadapt.recipe import load_recipe
from langadapt.recipe.data import DataConfig, DataSlice
from langadapt.run.context import StageContext

REPO = Path(__file__).resolve().parents[2]


bench = load_benchmark("warm_vs_cold")


def _recipe(plan: dict, variant: str):
    return load_recipe(REPO / plan["recipe"], bench.variant_overrides(plan, variant, 1234, 1234)).recipe


def test_variant_set_overrides_common():
    """`common:` pins the stored results' stage-2 LR; a variant's own `set:` must still win."""
    plan = bench.load_plan()
    assert "stage2.optimizer.lr=1.0e-3" in plan["common"]
    assert _recipe(plan, "warm_mean").stage2.optimizer.lr == 1.0e-3  # not the demo's shipped 4e-3
    assert _recipe(plan, "warm_mean_lr4e-3").stage2.optimizer.lr == 4.0e-3
    assert _recipe(plan, "cold_lr2e-3").stage2.optimizer.lr == 2.0e-3
    synthetic = {"recipe": plan["recipe"], "common": ["stage1.steps=10", "seed=5"],
                 "variants": {"v": {"set": ["stage1.steps=20"]}, "w": {"set": []}}}
    assert _recipe(synthetic, "v").stage1.steps == 20
    assert _recipe(synthetic, "w").stage1.steps == 10
    assert _recipe(synthetic, "v").seed == 1234  # the run's seed comes last of all


def test_epochs_variants_shrink_only_the_trained_nb_data():
    plan = bench.load_plan()
    reference = _recipe(plan, "warm_mean")
    variants = [n for n, v in plan["variants"].items() if v["group"] == "epochs"]
    assert variants == ["epochs_4", "epochs_8", "epochs_16", "epochs_8_tail",
                        "epochs_1_lowc", "epochs_2_lowc", "epochs_4_lowc"]
    nb = reference.data.sources[0]
    assert reference.data.sources[-1].lang not in bench.LANGS  # the neighbour the nb holders replace is not scored
    caps: dict[tuple[int, int], list[int | None]] = {}
    for name in variants:
        recipe = _recipe(plan, name)
        first, *others, last = recipe.data.sources
        assert others == reference.data.sources[1:-1]  # replay and scored neighbours unchanged
        trained, holder = (last, first) if name.endswith("_tail") else (first, last)
        assert trained.model_copy(update={"name": nb.name, "max_docs": None, "fetch": nb.fetch}) == nb
        if name.endswith("_tail"):  # the first max_docs documents held back, the trained source gets the rest
            assert holder.max_docs == 92 and trained.max_docs is None
        else:
            caps.setdefault((recipe.stage1.steps, recipe.stage2.steps), []).append(trained.max_docs)
        if trained.max_docs is not None or name.endswith("_tail"):
            # The held-back documents: the same file, a target source (the tokenizer sees them) never trained on.
            assert holder.path == nb.path and holder.lang == "nb" and holder.role == "target" and holder.weight == 0
        steps = {"steps": reference.stage1.steps}
        assert recipe.tokenizer == reference.tokenizer
        assert recipe.stage1.model_copy(update=steps) == reference.stage1
        assert recipe.stage2.model_copy(update={"steps": reference.stage2.steps}) == reference.stage2
    # Two series, each fewer documents for more passes at one schedule: the demo's, and 26 + 87 steps
    # whose 80% nb share is one pass over all 185k nb tokens (118 documents of the demo's tokenizer).
    assert caps == {(60, 200): [73, 33, 16], (26, 87): [None, 64, 29]}
    assert (26 + 87) * 16 * 128 * 0.8 == pytest.approx(185_090, rel=0.01)


def test_capped_source_and_holder_split_the_documents_as_the_full_source_does(tmp_path: Path):
    """Exact dedup puts each document in one source: the capped source has the first max_docs, the
    holder the rest, held-out documents stay held out, and the target text is the full set in order."""
    rng = random.Random(0)
    words = ["og", "i", "det", "som", "er", "på", "en", "til", "av", "for", "med", "har", "ikke", "den"]
    texts = [" ".join(rng.choice(words) for _ in range(30)) + f" dokument {i}." for i in range(120)]
    corpus = tmp_path / "nb.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts))

    def data_stage(name: str, sources: list[dict]) -> Path:
        ctx = StageContext(run_dir=tmp_path / name, stage="data", seed=0)
        ctx.out.mkdir(parents=True)
        run_data_stage(DataSlice(DataConfig.model_validate({"sources": sources, "valid_fraction": 0.1})), ctx)
        return ctx.out

    nb = {"name": "nb", "path": str(corpus), "lang": "nb", "weight": 0.8}
    full = data_stage("full", [nb])
    split = data_stage("split", [{**nb, "max_docs": 40},
                                 {"name": "nb.rest", "path": str(corpus), "lang": "nb", "weight": 0}])
    trained = [d["text"] for d in iter_split(split, "train") if d["source"] == "nb"]
    rest = [d["text"] for d in iter_split(split, "train") if d["source"] == "nb.rest"]
    assert set(trained) <= set(texts[:40]) and not set(trained) & set(rest)
    assert [d["text"] for d in iter_split(split, "train", roles={"target"})] == \
        [d["text"] for d in iter_split(full, "train")]  # the tokenizer's input, in the same order
    assert sorted(texts_by_lang(split, "valid")["nb"]) == sorted(texts_by_lang(full, "valid")["nb"])


def test_source_passes_sum_the_stages_last_rows(tmp_path: Path):
    rows = {"stage1": [{"step": 10, "tokens_by_source": {"nb": 100, "en": 20}, "epochs_by_source": {"nb": 0.25, "en": 0.01}},
                       {"step": 10, "valid": {"nb": {"loss": 5.0}}}],
            "stage2": [{"step": 10, "tokens_by_source": {"nb": 50, "en": 10}, "epochs_by_source": {"nb": 0.125, "en": 0.005}},
                       {"step": 20, "tokens_by_source": {"nb": 400, "en": 80}, "epochs_by_source": {"nb": 1.0, "en": 0.04}},
                       {"step": 20, "valid": {"nb": {"loss": 4.0}}}]}
    for stage, lines in rows.items():
        (tmp_path / stage).mkdir()
        (tmp_path / stage / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert bench.source_passes(tmp_path, ["stage1", "stage2"]) == {
        "nb": {"tokens": 500, "epochs": 1.25}, "en": {"tokens": 100, "epochs": 0.05}}
    assert bench.source_passes(tmp_path, ["stage2"])["nb"] == {"tokens": 400, "epochs": 1.0}
