"""recipes/normistral_11b_warm.yaml: plans offline with the published mixture, and its tokenizer
and embeddings stages run on the real Mistral-Nemo Tekken vocabulary (a tiny body, laid out as
the Hub repository with tekken.json beside tokenizer.json) with local text standing in for each
of its nine sources."""

from __future__ import annotations

import gzip
import json
from functools import partial
from pathlib import Path

import pytest
import yaml
from helpers.cli import run_cli
from helpers.real_bases import build_base

from langadapt.tokenizer.loading import load_tokenizer

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "normistral_11b_warm.yaml"
PUBLISHED = {"nb": 48.8, "nn": 5, "sv": 15, "da": 15, "code": 10, "en": 4.6, "is": 1, "fo": 0.1, "se": 0.6}


langadapt = partial(run_cli, timeout=1800)


def test_plan_offline_has_the_published_mixture_and_four_norwegian_passes() -> None:
    result = langadapt("plan", str(RECIPE), "--json")
    assert result.returncode == 0, result.stderr
    stage1, stage2 = json.loads(result.stdout)["stages"]
    assert stage1["trainable"] == "embeddings" and stage1["steps"] == 1000 and stage1["zero_stage"] == 1
    assert stage2["steps"] == 60000 and stage2["tokens"] == 60000 * 1024 * 4096
    for stage in (stage1, stage2):
        shares = {s["name"]: s["share"] for s in stage["mixture"]["sources"]}
        assert shares == pytest.approx({k: v / 100 for k, v in PUBLISHED.items()}, abs=2e-3)
    epochs = {s["name"]: s["epochs"] for s in stage2["mixture"]["sources"]}
    assert epochs["nb"] == pytest.approx(4.0) and epochs["nn"] == pytest.approx(4.0)
    assert stage2["memory_gb"]["zero3"]["total"] < 64  # fits an MI250X GCD under the recipe's ZeRO-3


def test_dry_run_off_the_cluster_names_the_missing_corpus() -> None:
    result = langadapt("run", str(RECIPE), "--dry-run")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "normistral_11b_warm.yaml:" in result.stderr and "data.sources[0].path" in result.stderr
    assert "matches no file" in result.stderr


def _stand_in_sources(shared_dir: Path, folder: Path) -> dict[str, Path]:
    """A small local file for each of the recipe's sources (real text where ../shared has the
    language; another language's text, labelled with the source's code, where it does not)."""
    corpus = shared_dir / "corpora"
    real = {"nb": "nb.debian-handbook.train", "nn": "nn.gimp-help.train", "sv": "sv.gimp-help.train",
            "da": "da.gimp-help.train", "en": "en.debian-handbook.train",
            "is": "da.gimp-help.valid", "fo": "nn.gimp-help.valid", "se": "fi.gimp-help.valid"}
    files = {}
    for name, source in real.items():
        with gzip.open(corpus / f"{source}.jsonl.gz", "rt", encoding="utf-8") as f:
            docs = [json.loads(line)["text"] for _, line in zip(range(60 if name == "nb" else 15), f)]
        files[name] = folder / f"{name}.jsonl"
        files[name].write_text("".join(json.dumps({"text": d}, ensure_ascii=False) + "\n" for d in docs))
    code = [p.read_text() for p in sorted((REPO / "langadapt" / "tokenizer").glob("*.py"))]
    files["code"] = folder / "code.jsonl"
    files["code"].write_text("".join(json.dumps({"text": c}) + "\n" for c in code))
    return files


@pytest.mark.slow
def test_tokenizer_and_embeddings_stages_on_the_real_tekken_vocabulary(tmp_path: Path, shared_dir: Path) -> None:
    base = build_base("nemo-tekken-hub", shared_dir, tmp_path / "nemo")
    files = _stand_in_sources(shared_dir, tmp_path)
    tree = yaml.safe_load(RECIPE.read_text())
    for source in tree["data"]["sources"]:
        source["path"] = str(files[source["name"]])
        source.pop("unique_tokens", None)
    tree["data"].update(cleaning={"min_chars": 20}, valid_fraction=0.1)
    tree["tokenizer"]["vocab_size"] = 4096
    tree.update(run_root=str(tmp_path / "runs"), base_model={"path": str(base)})
    recipe = tmp_path / "normistral_11b_small.yaml"
    recipe.write_text(yaml.safe_dump(tree, allow_unicode=True))
    result = langadapt("run", str(recipe), "--until", "embeddings")
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "runs" / "normistral_11b_warm"
    old, new = load_tokenizer(base), load_tokenizer(run / "embeddings" / "model")
    assert len(new) == 4096
    # Tekken's 1,000 reserved specials keep their ids and contents (chat and tool tokens among them).
    assert [new.convert_ids_to_tokens(i) for i in range(1000)] == [old.convert_ids_to_tokens(i) for i in range(1000)]
    assert (new.bos_token_id, new.eos_token_id) == (old.bos_token_id, old.eos_token_id) == (1, 2)
    summary = json.loads((run / "embeddings" / "mapping.json").read_text().split("\n", 1)[0][len('{"summary": '):-1])
    assert summary["special"] == 1000 and summary["fallback"] == 0 and summary["byte_segmented"] == 0
    assert summary["copied"] + summary["decomposed"] == 4096 - 1000
    text = "Norsk bokmål og nynorsk: «Pakkehandsamaren» opnar /etc/apt. def f(x): return x"
    assert new.decode(new(text, add_special_tokens=False)["input_ids"]) == text
