"""The run contract with stub stages and real fingerprints: a finished run is a fixed point,
a failed re-run keeps the previous output, exported and evaluated files are not overwritten
by surprise, and the layout is the one place that spells a stage's folder."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import numpy as np
import pytest
from helpers.recipes import scratch_recipe
from safetensors.numpy import save as safetensors_bytes

from langadapt import cli
from langadapt.errors import LangadaptError
from langadapt.export.stage import check_replaceable, file_hashes
from langadapt.recipe import load_recipe
from langadapt.pipeline import runner as pipeline
from langadapt.run import contenthash
from langadapt.run import completion
from langadapt.run.context import StageContext
from langadapt.run.layout import RunLayout
from langadapt.pipeline.runner import STAGES, Stage, run_pipeline

REPO = Path(__file__).resolve().parents[2]
WEIGHTS = safetensors_bytes({"w": np.zeros(2, np.float32)})
"""A valid (tiny) safetensors file: the preflight check reads the header of the base's weights."""

WARM = """\
name: warm
run_root: {root}/runs
init: warm
base_model:
  path: {root}/runs/src/export/model
  build_recipe: {root}/src.yaml
data:
  sources:
    - {{name: nb, path: {root}/nb.txt, lang: nb}}
tokenizer:
  vocab_size: 300
evaluation:
  suites: [{root}/suite.yaml]
"""


@pytest.fixture(autouse=True)
def restore_logging():
    """cli.main points the langadapt logger at the stderr of the moment (pytest's capture)."""
    import logging

    logger = logging.getLogger("langadapt")
    state = (logger.handlers[:], logger.level, logger.propagate)
    yield
    logger.handlers[:], logger.level, logger.propagate = state


@pytest.fixture()
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A warm recipe whose base model is built by another recipe; every stage is a stub that
    records its call, and `export` writes a small model folder (the base of the warm recipe)."""
    (tmp_path / "en.txt").write_text("hello")
    (tmp_path / "nb.txt").write_text("hei")
    (tmp_path / "suite.yaml").write_text("name: stub\n")
    (tmp_path / "src.yaml").write_text(scratch_recipe(tmp_path, "src", source="en.txt", lang="en"))
    (tmp_path / "warm.yaml").write_text(WARM.format(root=tmp_path))
    calls: list[str] = []
    failing: set[str] = set()

    def fake_table(recipe):
        def make(name):
            def run_stub(ctx: StageContext):
                if name in failing:
                    (ctx.out / "half-written.txt").write_text("x")
                    raise LangadaptError(f"{name} failed")
                (ctx.out / "artifact.txt").write_text(f"{recipe.name}:{name}:{len(calls)}")
                if name == "export":
                    folder = ctx.layout.export.model
                    folder.mkdir(parents=True, exist_ok=True)
                    (folder / "config.json").write_text('{"model_type": "llama"}')
                    (folder / "model.safetensors").write_bytes(WEIGHTS)
                    (folder / "README.md").write_text("card")
                    return {"files": file_hashes(folder), "folder": str(folder), "verification": {"prompt": "x"}}
                calls.append(f"{recipe.name}:{name}")
                return {"ran": name}
            return run_stub
        sections = {"evaluate": ("evaluation",)}
        files = {stage.name: stage.files for stage in real_table(recipe)}  # the base and suite files the stages read
        return [Stage(name, sections.get(name, (name,)), make(name), files=files[name]) for name in STAGES]

    real_table = pipeline.stage_table
    monkeypatch.setattr(pipeline, "stage_table", fake_table)
    monkeypatch.setattr(pipeline, "check_recipe", lambda loaded, selected: None)  # stubs read nothing
    monkeypatch.chdir(tmp_path)
    return tmp_path, calls, failing


def warm_calls(calls: list[str]) -> list[str]:
    return [c.split(":")[1] for c in calls if c.startswith("warm:")]


def test_a_finished_run_skips_every_stage_also_after_touching_the_base(run) -> None:
    root, calls, _ = run
    recipe = root / "warm.yaml"
    run_pipeline(load_recipe(recipe))  # builds the base with src.yaml first, then the warm run
    assert calls[0] == "src:data" and warm_calls(calls) == ["data", "tokenizer", "embeddings", "stage1", "stage2", "evaluate"]
    calls.clear()
    actions = dict(run_pipeline(load_recipe(recipe)))
    assert calls == [] and set(actions.values()) == {"skip (complete, inputs unchanged)"}

    base = root / "runs" / "src" / "export" / "model"
    later = base.stat().st_mtime + 1000
    for f in base.iterdir():
        os.utime(f, (later, later))
    hashed: list[Path] = []
    original = contenthash.file_sha256
    def counting(path: Path) -> str:
        hashed.append(path)
        return original(path)
    contenthash.file_sha256 = counting  # type: ignore[assignment]
    try:
        dry = dict(run_pipeline(load_recipe(recipe), dry_run=True))
        assert set(dry.values()) == {"skip (complete, inputs unchanged)"}
        run_pipeline(load_recipe(recipe))
        assert calls == []
        n_after_touch = len(hashed)
        run_pipeline(load_recipe(recipe))  # the touched files' new hashes are cached in the run dir
        assert len(hashed) == n_after_touch
    finally:
        contenthash.file_sha256 = original  # type: ignore[assignment]

    (base / "model.safetensors").write_bytes(safetensors_bytes({"w": np.ones(2, np.float32)}))  # new content: everything after data re-runs
    run_pipeline(load_recipe(recipe))
    assert calls == [f"warm:{s}" for s in ("tokenizer", "embeddings", "stage1", "stage2", "evaluate")]


def test_a_changed_suite_file_reruns_evaluate(run) -> None:
    root, calls, _ = run
    run_pipeline(load_recipe(root / "warm.yaml"))
    calls.clear()
    (root / "suite.yaml").write_text("name: stub2\n")
    run_pipeline(load_recipe(root / "warm.yaml"))
    assert warm_calls(calls) == ["evaluate"]


def test_a_changed_suite_data_file_or_compare_model_reruns_evaluate(run) -> None:
    """evaluate's print hashes the files the suite loader resolves (a task's data file, relative to
    its suite's folder) and the `compare` model folders, not only the suite YAML."""
    root, calls, _ = run
    (root / "data").mkdir()
    pairs = root / "data" / "pairs.jsonl"
    pairs.write_text('{"good": "Hun er glad.", "bad": "Hun er glade."}\n')
    (root / "suite.yaml").write_text("name: stub\ntasks:\n  - {kind: minimal_pairs, lang: nb, path: data/pairs.jsonl}\n")
    other = root / "other_model"
    other.mkdir()
    (other / "config.json").write_text('{"model_type": "llama"}')
    (other / "model.safetensors").write_bytes(WEIGHTS)
    compare = [f"evaluation.compare=[{other}]"]
    run_pipeline(load_recipe(root / "warm.yaml", compare))
    calls.clear()
    pairs.write_text('{"good": "Han er glad.", "bad": "Han er glade."}\n')
    run_pipeline(load_recipe(root / "warm.yaml", compare))
    assert warm_calls(calls) == ["evaluate"]
    calls.clear()
    (other / "model.safetensors").write_bytes(safetensors_bytes({"w": np.ones(2, np.float32)}))
    run_pipeline(load_recipe(root / "warm.yaml", compare))
    assert warm_calls(calls) == ["evaluate"]
    calls.clear()
    run_pipeline(load_recipe(root / "warm.yaml", compare))
    assert warm_calls(calls) == []


def test_a_failed_rerun_leaves_the_previous_output_intact(run) -> None:
    root, calls, failing = run
    run_pipeline(load_recipe(root / "warm.yaml"))
    layout = RunLayout(root / "runs" / "warm")
    before = (layout.evaluate / "artifact.txt").read_text()
    manifest = layout.manifest("evaluate").read_text()
    failing.add("evaluate")
    with pytest.raises(LangadaptError, match="evaluate failed"):
        run_pipeline(load_recipe(root / "warm.yaml"), only="evaluate")
    assert (layout.evaluate / "artifact.txt").read_text() == before
    assert completion.is_complete(layout.evaluate) and layout.manifest("evaluate").read_text() == manifest
    assert not (layout.evaluate / "half-written.txt").exists()
    failing.clear()
    run_pipeline(load_recipe(root / "warm.yaml"), only="evaluate")
    assert (layout.evaluate / "artifact.txt").read_text() != before
    assert not layout.work_dir("evaluate").exists() and not layout.retired_dir("evaluate").exists()


def test_a_swap_cut_by_a_crash_is_finished_at_the_next_start(tmp_path: Path) -> None:
    layout = RunLayout(tmp_path)
    for folder, text, complete in ((layout.retired_dir("data"), "old", True), (layout.work_dir("data"), "new", True),
                                   (layout.retired_dir("tokenizer"), "old", True), (layout.work_dir("tokenizer"), "half", False)):
        folder.mkdir(parents=True)
        (folder / "a.txt").write_text(text)
        if complete:
            completion.write_manifest(folder, {"fingerprint": "x"})
    completion.recover(layout)
    assert (layout.data.root / "a.txt").read_text() == "new" and not layout.retired_dir("data").exists()
    assert (layout.tokenizer.root / "a.txt").read_text() == "old"


def test_export_push_on_a_finished_run_reaches_the_upload(run, monkeypatch, capsys) -> None:
    root, calls, _ = run
    run_pipeline(load_recipe(root / "warm.yaml"))
    calls.clear()
    uploads: list[dict] = []

    class FakeApi:
        def create_repo(self, repo_id, **kwargs):
            uploads.append({"create": repo_id})

        def create_commit(self, repo_id, operations, **kwargs):
            uploads.append({"repo_id": repo_id, "files": sorted(op.path_in_repo for op in operations), **kwargs})
            return "commit-url"

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    folder = RunLayout(root / "runs" / "warm").export.model
    (folder / "README.md").write_text("my own card")  # pushed as the user edited it
    assert cli.main(["export", str(root / "warm.yaml"), "--push-to-hub", "org/x"]) == 0
    assert calls == []
    assert uploads == [{"create": "org/x"}, {"repo_id": "org/x", "files": ["README.md", "config.json", "model.safetensors"],
                                             "commit_message": "Upload model exported by langadapt", "revision": None}]
    assert (folder / "README.md").read_text() == "my own card"
    assert "export is up to date" in capsys.readouterr().out


def test_export_refuses_to_replace_an_existing_export_without_overwrite(run, capsys) -> None:
    root, calls, _ = run
    run_pipeline(load_recipe(root / "warm.yaml"))
    folder = RunLayout(root / "runs" / "warm").export.model
    (folder / "README.md").write_text("my own card")
    args = ["export", str(root / "warm.yaml"), "--set", "export.license=mit"]  # a changed export
    assert cli.main(args) == cli.EXIT_USER_ERROR
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--overwrite" in err and str(folder) in err
    assert (folder / "README.md").read_text() == "my own card"
    assert cli.main([*args, "--overwrite"]) == 0
    assert (folder / "README.md").read_text() == "card"


def test_the_export_stage_refuses_a_hand_edited_card(tmp_path: Path) -> None:
    layout = RunLayout(tmp_path)
    folder = layout.export.model
    folder.mkdir(parents=True)
    (folder / "README.md").write_text("card")
    ctx = StageContext(run_dir=tmp_path, stage="export", seed=0, layout=layout.building("export", layout.work_dir("export")))
    with pytest.raises(LangadaptError, match="not written by this run's export; pass --overwrite"):
        check_replaceable(ctx)
    completion.write_manifest(layout.export.root, {"summary": {"files": file_hashes(folder)}})
    check_replaceable(ctx)  # untouched since exported: a re-export may replace it
    (folder / "README.md").write_text("card, edited")
    with pytest.raises(LangadaptError, match=r"README.md changed since it was exported .*--overwrite"):
        check_replaceable(ctx)
    check_replaceable(StageContext(run_dir=tmp_path, stage="export", seed=0, overwrite=True))


def test_eval_refuses_to_overwrite_results(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text('{"models": {}}')
    (tmp_path / "config.json").write_text("{}")  # a model folder: what to evaluate is checked first
    assert cli.main(["eval", str(tmp_path), "--out", str(out)]) == cli.EXIT_USER_ERROR
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--overwrite" in err and "results.json" in err
    assert (out / "results.json").read_text() == '{"models": {}}'


def test_the_pipeline_tells_evaluation_which_models_the_recipe_makes(tmp_path: Path) -> None:
    layout = RunLayout(tmp_path)
    stages = [Stage(name, (), lambda ctx: {}, "disabled" if name == "stage1" else None) for name in STAGES]
    assert pipeline.run_models(stages, layout) == {"init": layout.embeddings.model, "adapted": layout.stage2.model}


LAYOUT_NAMES = {"data", "tokenizer", "embeddings", "stage1", "stage2", "evaluate", "export", "model", "tokens",
                "checkpoints", "train", "valid", "metrics.jsonl", "manifest.json", "results.json", "latest",
                "recipe.resolved.yaml", "exported_checkpoints", "eval", "trainer_state.json", "shared_rows.json"}
"""Folder and file names of a run (run.layout.RunLayout) and of a report folder (evaluation.report)."""


def spelled_paths(source: str) -> list[tuple[int, str]]:
    """(line, name) for each layout name used to build a path: `x / "name"`, `x / f"name/..."`,
    `joinpath("name")`, `Path(x, "name")`, `os.path.join(x, "name")`, `stage_dir("name")`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            parts = [node.left, node.right]
        elif isinstance(node, ast.Call) and (getattr(node.func, "attr", None) or getattr(node.func, "id", None)) in (
                "joinpath", "Path", "join", "stage_dir"):
            parts = node.args
        else:
            continue
        for part in parts:
            texts = [part.value] if isinstance(part, ast.Constant) and isinstance(part.value, str) else [
                v.value for v in getattr(part, "values", []) if isinstance(v, ast.Constant)]
            found += [(node.lineno, piece) for text in texts for piece in text.split("/") if piece in LAYOUT_NAMES]
    return found


def test_no_module_but_the_layout_spells_a_run_folder_name() -> None:
    """Paths of a run belong to run.layout.RunLayout; a report folder's file names to evaluation.report."""
    allowed = {"run/layout.py": "the layout itself", "evaluation/report.py": "the report folder's own files",
               "data/shards.py": "the shard format's valid/ subfolder (also written outside runs)"}
    found = [f"{path.relative_to(REPO / 'langadapt')}:{line}: {name}"
             for path in (REPO / "langadapt").rglob("*.py")
             if str(path.relative_to(REPO / "langadapt")) not in allowed
             for line, name in spelled_paths(path.read_text())]
    assert found == []


def test_the_spelling_finder_sees_every_form() -> None:
    source = ('a / "stage1"\nb / f"tokens/{x}"\nc.joinpath("model")\nPath(d, "metrics.jsonl")\n'
              'os.path.join(e, "checkpoints")\nlayout.stage_dir("export")\nf / "other"\n')
    assert [name for _, name in spelled_paths(source)] == ["stage1", "tokens", "model", "metrics.jsonl",
                                                            "checkpoints", "export"]


RUN_FILES = {"manifest.json", "COMPLETE", ".fingerprint", "trainer_state.json", "recipe.resolved.yaml",
             "recipe.owner.json", "stats.json", "metrics.json", "fertility.png", "mapping.json", "report.json",
             "shared_rows.json", "metrics.jsonl", "summary.json", "results.json", "model.safetensors",
             "tokens.bin", "doc_offsets.npy", "meta.json"}
"""Every file name inside a run; and `step_`, the prefix of a checkpoint folder."""
STEP_PREFIX = "step_"
OWNERS = {
    "run/layout.py": RUN_FILES | {STEP_PREFIX},
    "data/shards.py": {"tokens.bin", "doc_offsets.npy", "meta.json"},  # the token-shard format, also outside runs
    "inputs/model_folder.py": {"model.safetensors"},  # a Hugging Face model folder's weights, also outside runs
    "evaluation/report.py": {"fertility.png"},  # a report folder's plots/, also outside runs
    "experiments/sweep.py": {"report.json"},  # a sweep folder's own report, not a run's
}
"""The modules that may spell a run's file names: the layout, and each format's own module
(`model.safetensors`, huggingface_hub's SAFETENSORS_SINGLE_FILE, is the model folder's, spelled
there so the layout loads without huggingface_hub)."""
PENDING: dict[str, set[str]] = {}
"""Spellings still to move to their owner (issue 31: these files were being changed for other items
when the layout took the names over). Each must still be there: one that moves leaves this list."""


def spelled_file_names(source: str) -> list[tuple[int, str]]:
    """(line, name) for every string in `source` that is, or has a `/`-separated piece that is, a run's
    file name (`"meta.json"`, `f"{x}/tokens.bin"`, `"*/meta.json"`) or starts with `step_`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            for piece in node.value.split("/"):
                if piece in RUN_FILES:
                    found.append((node.lineno, piece))
                elif piece.startswith(STEP_PREFIX):
                    found.append((node.lineno, STEP_PREFIX))
    return found


def test_every_file_name_of_a_run_is_spelled_by_its_owner() -> None:
    found: dict[str, set[str]] = {}
    for path in (REPO / "langadapt").rglob("*.py"):
        module = str(path.relative_to(REPO / "langadapt"))
        names = {name for _, name in spelled_file_names(path.read_text())} - OWNERS.get(module, set())
        if names:
            found[module] = names
    strays = {module: names - PENDING.get(module, set()) for module, names in found.items()}
    assert {module: names for module, names in strays.items() if names} == {}
    gone = {module: names - found.get(module, set()) for module, names in PENDING.items()}
    assert {module: names for module, names in gone.items() if names} == {}, "moved to their owner: drop from PENDING"


def test_the_file_name_finder_sees_every_form() -> None:
    source = ('a = "meta.json"\nb = f"{x}/tokens.bin"\nc = root.glob("*/meta.json")\nd = f"step_{n:08d}"\n'
              'e = root.glob("step_*.tmp")\nf = "metrics.json.bak"\ng = "a stats.json in prose"\n')
    assert spelled_file_names(source) == [(1, "meta.json"), (2, "tokens.bin"), (3, "meta.json"), (4, STEP_PREFIX),
                                          (5, STEP_PREFIX)]


def test_summaries_name_final_paths_not_the_work_folder(run) -> None:
    root, _, _ = run
    run_pipeline(load_recipe(root / "warm.yaml"))
    layout = RunLayout(root / "runs" / "warm")
    manifest = json.loads(layout.manifest("export").read_text())
    assert manifest["summary"]["folder"] == str(layout.export.model) and ".partial" not in json.dumps(manifest)
