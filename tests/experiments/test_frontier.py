"""`langadapt frontier` (issue 24 item 1) end to end on a tiny warm recipe: a 2x2 grid (a tokenizer
key x a training key), every point its own run, shared stages linked, a second invocation runs
nothing, the report written; a grid over the vocabulary road (`tokenizer.kind`) with each point's
tokens per byte (issue 29 item 4); and the grid's bad inputs as one error line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from langadapt import cli
from langadapt.experiments.frontier import parse_grid, point_id, render_markdown, split_values

RECIPE = """\
name: tiny_frontier
run_root: {root}/runs
seed: 7
init: warm
base_model:
  path: {root}/base
data:
  sources:
    - {{name: nb, path: {shared}/corpora/nb.debian-handbook.train.jsonl.gz, max_docs: 40,
       valid_path: {shared}/corpora/nb.debian-handbook.valid.jsonl.gz, lang: nb, role: target, weight: 0.8}}
    - {{name: en, path: {shared}/corpora/en.debian-handbook.train.jsonl.gz, max_docs: 40,
       valid_path: {shared}/corpora/en.debian-handbook.valid.jsonl.gz, lang: en, role: replay, weight: 0.2}}
    - {{name: sv, path: {shared}/corpora/sv.gimp-help.train.jsonl.gz, valid_path: {shared}/corpora/sv.gimp-help.valid.jsonl.gz,
       lang: sv, role: replay, weight: 0, max_docs: 2}}
tokenizer:
  kind: inherit
  vocab_size: 1024
stage1:
  steps: 2
  micro_batch_size: 2
  seq_len: 32
  optimizer: {{lr: 3.0e-3}}
  schedule: {{kind: constant, warmup_steps: 0}}
  checkpoint: {{every_steps: 2}}
stage2:
  steps: 3
  optimizer: {{lr: 1.0e-3}}
evaluation:
  suites: [{root}/bpb.yaml]
  random_baseline: false
  max_bytes_per_lang: 1500
  window: 32
export:
  enabled: false
"""
SUITE = "name: bpb\ntasks:\n  - {kind: bpb, langs: [nb, en, sv]}\n"
GRID = ["--grid", "tokenizer.vocab_size=768,1024", "--grid", "stage2.optimizer.lr=1e-3,4e-3"]


KIND_GRID = ["--grid", "tokenizer.kind=keep_base,inherit"]
"""The vocabulary roads as a grid (extend joins it once the schema has it)."""


def run_frontier(root: Path, tiny_en_llama: Path, grid: list[str]) -> tuple[Path, Path]:
    """The tiny recipe's frontier over `grid` in `root`: (recipe, output folder)."""
    shutil.copytree(tiny_en_llama, root / "base")
    (root / "bpb.yaml").write_text(SUITE)
    recipe = root / "tiny.yaml"
    recipe.write_text(RECIPE.format(root=root, shared=tiny_en_llama.parents[1]))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # two threads on the shared 2-core box spin against each other
    try:
        code = cli.main(["frontier", str(recipe), *grid, "--out", str(root / "out")])
    finally:
        torch.set_num_threads(threads)
    assert code == 0
    return recipe, root / "out"


@pytest.fixture(scope="module")
def frontier(tmp_path_factory: pytest.TempPathFactory, tiny_en_llama: Path) -> tuple[Path, Path, str]:
    """The frontier run once: (recipe, output folder, what the command printed)."""
    return (*run_frontier(tmp_path_factory.mktemp("frontier"), tiny_en_llama, GRID), "")


def own_tokens_per_byte(run_dir: Path, lang: str, tokenizer: str = "new") -> float:
    """1 / the bytes per token the point's tokenizer stage measured (what the report must show)."""
    metrics = json.loads((run_dir / "tokenizer" / "metrics.json").read_text())
    return 1 / metrics["tokenizers"][tokenizer][lang]["bytes_per_token"]


def stage_dirs(out: Path, stage: str) -> tuple[list[Path], list[Path]]:
    """(real folders, symlinks) of `stage` across the points' runs."""
    found = [run / stage for run in sorted(out.iterdir()) if (run / stage).exists() or (run / stage).is_symlink()]
    return [p for p in found if not p.is_symlink()], [p for p in found if p.is_symlink()]


@pytest.mark.slow
def test_four_points_each_with_gain_forgetting_and_cost(frontier) -> None:
    recipe, out, _ = frontier
    report = json.loads((out / "frontier.json").read_text())
    points = report["points"]
    assert len(points) == 4 and len({p["id"] for p in points}) == 4
    assert {tuple(p["grid"].values()) for p in points} == {("768", "1e-3"), ("768", "4e-3"),
                                                          ("1024", "1e-3"), ("1024", "4e-3")}
    for p in points:
        assert p["target_lang"] == "nb" and p["forgetting_lang"] in ("en", "sv")
        assert p["gain"] == pytest.approx(-p["target_change"])
        assert p["train_tokens"] == (2 + 3) * 2 * 32  # steps x micro batch x seq_len, both stages
        assert f"name=tiny_frontier-{p['id']}" in p["sets"] and "evaluation.cold_baseline=false" in p["sets"]
        assert p["command"].startswith(f"langadapt run {recipe}") and "--set stage2.optimizer.lr=" in p["command"]
        assert "stage2:\n  optimizer:\n    lr:" in p["recipe_lines"]
        results = json.loads((Path(p["run_dir"]) / "evaluate" / "results.json").read_text())
        assert results["target_langs"] == ["nb"]
        assert results["tradeoff"]["adapted"]["forgetting"] == pytest.approx(p["forgetting"])
    assert any(p["pareto"] for p in points)


@pytest.mark.slow
def test_stages_are_shared_data_once_one_tokenizer_per_setting(frontier) -> None:
    _, out, _ = frontier
    runs = [r for r in out.iterdir() if r.is_dir()]
    assert len(runs) == 4
    expected = {"data": 1, "tokenizer": 2, "embeddings": 2, "stage1": 2, "stage2": 4, "evaluate": 4}
    for stage, owned in expected.items():
        real, links = stage_dirs(out, stage)
        assert len(real) == owned, stage
        assert len(links) == 4 - owned, stage
        assert all((p / "COMPLETE").is_file() for p in real + links), stage


@pytest.mark.slow
def test_a_second_invocation_runs_nothing_new(frontier, capsys, caplog) -> None:
    recipe, out, _ = frontier
    before = {p: p.stat().st_mtime_ns for p in out.rglob("COMPLETE")}
    caplog.set_level("INFO", logger="langadapt")
    assert cli.main(["frontier", str(recipe), *GRID, "--out", str(out)]) == 0
    assert {p: p.stat().st_mtime_ns for p in out.rglob("COMPLETE")} == before
    assert "frontier complete" in capsys.readouterr().out


@pytest.mark.slow
def test_the_report_files(frontier) -> None:
    _, out, _ = frontier
    markdown = (out / "frontier.md").read_text()
    points = json.loads((out / "frontier.json").read_text())["points"]
    assert "![gain vs forgetting](frontier.png)" in markdown and "★" in markdown
    for p in points:
        tok_byte, base = (own_tokens_per_byte(Path(p["run_dir"]), "nb", name) for name in ("new", "base"))
        assert p["tokens_per_byte"]["run"]["nb"] == pytest.approx(tok_byte)
        assert p["tokens_per_byte"]["base"]["nb"] == pytest.approx(base)
        assert (f"| {p['id']} | {p['grid']['tokenizer.vocab_size']} | {p['grid']['stage2.optimizer.lr']} | "
                f"nb {p['target_change']:+.1%} | {tok_byte:.3f} | {p['forgetting_lang']} ") in markdown
        assert p["command"] in markdown
    assert "| target (bpb vs base) | nb tok/byte | largest forgetting (bpb vs base) |" in markdown
    assert (out / "frontier.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_a_grid_over_the_vocabulary_road(tmp_path: Path, tiny_en_llama: Path) -> None:
    """keep_base vs inherit (replace): a tokenizer stage each, the kind in each label, and what a
    Bokmål token costs with each: keep_base's is the base tokenizer's own."""
    _, out = run_frontier(tmp_path, tiny_en_llama, KIND_GRID)
    points = {p["grid"]["tokenizer.kind"]: p for p in json.loads((out / "frontier.json").read_text())["points"]}
    assert {kind: p["label"] for kind, p in points.items()} == {kind: f"kind={kind}" for kind in points}
    assert set(points) == {"keep_base", "inherit"}
    for stage, owned in {"data": 1, "tokenizer": 2, "embeddings": 2, "stage2": 2}.items():
        real, links = stage_dirs(out, stage)
        assert (len(real), len(links)) == (owned, 2 - owned), stage
    kept, replaced = points["keep_base"]["tokens_per_byte"], points["inherit"]["tokens_per_byte"]
    measured = own_tokens_per_byte(Path(points["keep_base"]["run_dir"]), "nb")  # the stage's only tokenizer
    assert kept["run"]["nb"] == kept["base"]["nb"] == pytest.approx(measured)
    assert replaced["base"]["nb"] == pytest.approx(kept["base"]["nb"])  # one base model, measured twice
    assert replaced["run"]["nb"] < replaced["base"]["nb"]  # a Bokmål vocabulary: fewer tokens per byte
    markdown = (out / "frontier.md").read_text()
    assert f"with the base tokenizer: nb {kept['base']['nb']:.3f}." in markdown
    for kind, p in points.items():
        own = p["tokens_per_byte"]["run"]["nb"]
        assert f"| {p['id']} | {kind} | nb {p['target_change']:+.1%} | {own:.3f} |" in markdown
        results = json.loads((Path(p["run_dir"]) / "evaluate" / "results.json").read_text())
        assert results["tokens_per_byte"] == p["tokens_per_byte"]


def test_the_table_shows_each_targets_tokens_per_byte() -> None:
    """The column a reader decides by, from frontier.json's numbers (a point without them shows a dash)."""
    def point(kind: str, run: dict, base: dict, targets: list[str]) -> dict:
        return {"id": kind[:4], "label": f"kind={kind}", "grid": {"tokenizer.kind": kind}, "gain": 0.5,
                "target_lang": targets[0], "target_change": -0.5, "forgetting_lang": "en", "forgetting": 0.05,
                "target_langs": targets, "tokens_per_byte": {"run": run, "base": base}, "train_tokens": 640,
                "train_seconds": 3.0, "pareto": True, "headline": "h", "recipe_lines": "", "command": "c"}

    rows = [point("keep_base", {"nb": 1 / 3}, {"nb": 1 / 3}, ["nb"]),
            point("inherit", {"nb": 0.25, "nn": 0.3}, {"nb": 1 / 3}, ["nb", "nn"]),
            point("byte_bpe", {}, {}, ["nb"])]  # its tokenizer stage recorded no metrics
    markdown = render_markdown({"recipe": "r.yaml", "grid": {"tokenizer.kind": ["keep_base", "inherit"]},
                                "points": rows})
    assert ("| point | tokenizer.kind | target (bpb vs base) | nb tok/byte | nn tok/byte | largest forgetting"
            in markdown)
    assert "| keep | keep_base | nb -50.0% | 0.333 | – | en +5.0% |" in markdown
    assert "| inhe | inherit | nb -50.0% | 0.250 | 0.300 | en +5.0% |" in markdown
    assert "| byte | byte_bpe | nb -50.0% | – | – | en +5.0% |" in markdown
    assert "with the base tokenizer: nb 0.333." in markdown
    header = next(line for line in markdown.splitlines() if line.startswith("| point"))
    assert markdown.count("|---") == header.count("|") - 1


@pytest.mark.parametrize(("grid", "fragment"), [
    ("stage2.optimiser.lr=1e-3,2e-3", "optimiser"),
    ("stage2.steps", "expected KEY=V1,V2"),
    ("name=a,b", "the frontier sets name and run_root"),
    ("stage2.steps=1,1", "a value is given twice"),
])
def test_a_bad_grid_is_one_error_line_before_any_work(tmp_path: Path, capsys, grid: str, fragment: str) -> None:
    (tmp_path / "nb.txt").write_text("ord " * 30)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"name: r\nrun_root: {tmp_path}/runs\ninit: scratch\nbase_model:\n  architecture: "
                      f"{{model_type: llama}}\ndata:\n  sources:\n    - {{name: nb, path: {tmp_path}/nb.txt, lang: nb}}\n"
                      "tokenizer:\n  vocab_size: 300\n")
    assert cli.main(["frontier", str(recipe), "--grid", grid]) == cli.EXIT_USER_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("langadapt: error: frontier") and fragment in err[0], err
    assert not (tmp_path / "runs").exists()


def test_grid_values_keep_commas_inside_brackets() -> None:
    assert split_values("{nb: 0.7, en: 0.3},{nb: 1.0}") == ["{nb: 0.7, en: 0.3}", "{nb: 1.0}"]
    assert split_values("'a,b',c") == ["'a,b'", "c"]
    assert parse_grid(["a.b=1,2", "c=[1, 2],[3]"]) == {"a.b": ["1", "2"], "c": ["[1, 2]", "[3]"]}
    assert point_id({"a": "1", "b": "2"}) == point_id({"b": "2", "a": "1"})


def test_a_point_where_no_language_got_worse_shows_none_not_a_forgetting() -> None:
    """Issue 38: the column is the worst other language's change; a fall is no forgetting."""
    def point(pid: str, forgetting: float | None) -> dict:
        return {"id": pid, "label": "lr=x", "grid": {"stage2.optimizer.lr": pid}, "gain": 0.5,
                "target_lang": "nb", "target_change": -0.5, "forgetting_lang": "en" if forgetting is not None else None,
                "forgetting": forgetting, "target_langs": [], "tokens_per_byte": {}, "train_tokens": 1,
                "train_seconds": 1.0, "pareto": True, "headline": "h", "recipe_lines": "", "command": "c"}

    markdown = render_markdown({"recipe": "r.yaml", "grid": {"stage2.optimizer.lr": ["a", "b", "c"]},
                                "points": [point("a", 0.05), point("b", -0.01), point("c", None)]})
    assert "| a | a | nb -50.0% | en +5.0% |" in markdown
    assert "| b | b | nb -50.0% | none (en -1.0%: least gain) |" in markdown
    assert "| c | c | nb -50.0% | – |" in markdown
