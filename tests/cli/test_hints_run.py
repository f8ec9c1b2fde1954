"""Every command langadapt tells a user to run exists and does what it says (issue 38).

Hints are collected from their builders (`recipe.hints`) and by triggering the real messages where
that is cheap (preflight's offline Hub source, the offline base model, lm-eval's offline dataset,
the export's licence guard, `langadapt run --until`'s last line, `plan`'s recommendation, the data
readers' conversions). Then:

- an external command's `--help` runs (hf, wandb, pip, gzip, zstd, iconv, jq, apt-get), and every
  option the hint uses appears in that help; a tool not installed here is skipped by name;
- the cheap data commands (iconv, jq, gzip -t, zstd -t) run for real on small files;
- a `langadapt` command is parsed by the CLI's own parser, and its `--set` items are applied to a
  real recipe (key and value validated by the schema);
- the `python -c` that fetches a Hub dataset runs against a stand-in `datasets` that records the
  call, which must be the data stage's (path, subset, revision, data files, split).

A static scan keeps the list whole: a new command-like string in langadapt/ names a tool this file
checks, and `huggingface-cli` (gone in huggingface_hub 1.0) appears nowhere.
"""

from __future__ import annotations

import ast
import gzip
import json
import re
import shlex
import shutil
import subprocess
import sys
import types
from argparse import Namespace
from pathlib import Path

import pytest
import tomllib

from langadapt.cli import build_parser
from langadapt.cli.run import run_outcome
from langadapt.errors import LangadaptError
from langadapt.recipe import load_recipe
from langadapt.recipe.hints import (
    hub_dataset_fetch,
    hub_model_download,
    pip_install,
    schema_field,
    set_option,
)

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "langadapt"
RECIPE = REPO / "recipes" / "tiny_norwegian_warm.yaml"
SUBCOMMAND_WORDS = {"hf": 2, "wandb": 1, "pip": 1, "apt-get": 1}
"""At most how many words after the tool name name its subcommand (`hf auth login`, `wandb sync`):
plain lowercase words only, so `hf download org/name` stops before the repository."""


# --- checking a hint ---

def words(command: str) -> list[str]:
    """The shell words of a hint, leading `VAR=value` environment assignments left out."""
    parts = shlex.split(command)
    while parts and re.match(r"^[A-Z_][A-Z0-9_]*=", parts[0]):
        parts.pop(0)
    return parts


def check_external(command: str) -> None:
    """`tool [subcommand] --help` exits 0 and lists every option the hint uses."""
    parts = words(command)
    tool = parts[0]
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed here")
    path = [tool]
    for word in parts[1: 1 + SUBCOMMAND_WORDS.get(tool, 0)]:
        if not re.fullmatch(r"[a-z]+", word):
            break
        path.append(word)
    done = subprocess.run([*path, "--help"], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{' '.join(path)} --help: exit {done.returncode}: {done.stderr[-300:]}"
    help_text = done.stdout + done.stderr
    for option in (p.split("=")[0] for p in parts[len(path):] if p.startswith("-")):
        assert re.search(rf"(^|[\s,\[]){re.escape(option)}\b", help_text), f"{command}: {option} not in its --help"


def check_langadapt(command: str) -> Namespace:
    """Parsed by the CLI's parser; its `--set` items applied to a real recipe (the schema validates)."""
    parts = words(command)
    assert parts[0] == "langadapt", command
    try:
        args = build_parser().parse_args(parts[1:])
    except SystemExit as exc:
        raise AssertionError(f"{command}: the CLI refuses it (exit {exc.code})") from None
    if getattr(args, "overrides", None):
        load_recipe(RECIPE, args.overrides)
    return args


def check_set_items(items: list[str]) -> None:
    """`--set` items (as `key=value`) applied to a real recipe."""
    load_recipe(RECIPE, items)


def between(text: str, start: str, end: str) -> str:
    found = re.search(re.escape(start) + r"(.*?)" + re.escape(end), text, re.DOTALL)
    assert found, f"no {start!r}...{end!r} in: {text}"
    return found.group(1)


# --- the builders ---

def test_set_option_refuses_a_key_the_schema_lacks_and_a_value_of_the_wrong_type():
    assert set_option("stage2.steps", 100) == "--set stage2.steps=100"
    assert set_option("data.sources[0].weight", 0.5) == "--set 'data.sources[0].weight=0.5'"
    assert set_option("data.sources[0].subset", "no") == """--set 'data.sources[0].subset="no"'"""  # not YAML's false
    assert schema_field("data.sources[].subset").annotation is not None
    with pytest.raises(ValueError, match="stage2.stepz is not a recipe key"):
        set_option("stage2.stepz", 1)
    with pytest.raises(ValueError, match="not a valid value"):
        set_option("stage2.steps", "many")
    with pytest.raises(ValueError, match="is not a recipe key"):
        set_option("data.sources[0].nope", 1)


@pytest.mark.parametrize("key, value", [("export.license", "cc-by-sa-4.0"), ("stage2.steps", 100),
                                        ("data.sources[0].weight", 0.5), ("engine.kind", "deepspeed"),
                                        ("name", "no")])
def test_a_set_option_applies_to_a_real_recipe(key, value):
    item = shlex.split(set_option(key, value))[1]
    check_set_items([item])


def test_hub_model_download_is_the_hf_cli():
    command = hub_model_download("org/name", "v1.0")
    assert words(command) == ["hf", "download", "org/name", "--revision", "v1.0"]
    check_external(command)


def test_hub_dataset_fetch_passes_every_argument_through_the_shell():
    command = hub_dataset_fetch("org/Data", "it's", "main", {"train": ["a b.parquet"]}, "train")
    assert run_dataset_fetch(command) == (("org/Data", "it's"), {"revision": "main", "split": "train",
                                                                 "data_files": {"train": ["a b.parquet"]}})


@pytest.mark.slow  # over 2 s: not in the fast tier (tests/durations.json not yet refreshed)
def test_pip_hints_name_extras_and_packages_that_exist():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    from packaging.requirements import Requirement

    found = pip_hints_in_source()
    assert found, "the scan found no pip hint: the scan is broken"
    for where, requirement in found:
        parsed = Requirement(requirement)
        if parsed.name == "langadapt":
            assert parsed.extras <= set(extras), f"{where}: {requirement}: no such extra in pyproject.toml"
    assert words(pip_install("langadapt[eval]")) == ["pip", "install", "langadapt[eval]"]
    check_external(pip_install("langadapt[eval]"))


def pip_hints_in_source() -> list[tuple[str, str]]:
    """(file:line, requirement) for each `pip install X` written in langadapt/ (X a whole word of
    a string, or a `pip_install("X")` call); f-string holes are left out."""
    found: list[tuple[str, str]] = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            where = f"{path.relative_to(REPO)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for match in re.finditer(r"pip install ('[A-Za-z][^']*'|[A-Za-z][A-Za-z0-9_.\-\[\]>=<]*)", node.value):
                    found.append((where, match.group(1).strip("'")))
            elif (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "pip_install"):
                found += [(where, a.value) for a in node.args if isinstance(a, ast.Constant)]
    return found


# --- hints triggered where the tool prints them ---

def test_offline_hub_source_hint_fetches_the_subset_revision_and_files_the_stage_reads(monkeypatch, tmp_path):
    from langadapt.pipeline import preflight
    from langadapt.recipe.errors import Report

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("langadapt.run.base_model.hub_dataset_cached", lambda path: False)
    sets = ["data.sources[0].format=hf_hub", "data.sources[0].path=uonlp/CulturaX", 'data.sources[0].subset="no"',
            "data.sources[0].revision=abc123", "data.sources[0].data_files=no/no_part_00000.parquet",
            "data.sources[0].valid_path=null"]
    loaded = load_recipe(RECIPE, sets)
    report = Report(RECIPE, {}, {})
    preflight._check_hub_sources(loaded.recipe, report)
    line = next(line for line in report.lines() if "uonlp/CulturaX" in line)
    command = between(line, "(HF_HOME=DIR ", ") and run")
    call = run_dataset_fetch(command)
    source = loaded.recipe.data.sources[0]
    assert call == ((source.path, source.subset), {"revision": source.revision, "data_files": source.data_files,
                                                   "split": source.split}), line
    assert "streaming" not in call[1]  # prepared, so `datasets` finds it offline


def run_dataset_fetch(command: str) -> tuple[tuple, dict]:
    """Run a `python -c` dataset hint with a stand-in `datasets` that records load_dataset's call."""
    parts = words(command)
    assert parts[:2] == ["python", "-c"], command
    calls: list[tuple[tuple, dict]] = []
    fake = types.ModuleType("datasets")
    fake.load_dataset = lambda *args, **kwargs: calls.append((args, kwargs))
    saved = sys.modules.get("datasets")
    sys.modules["datasets"] = fake
    try:
        exec(compile(parts[2], "<hint>", "exec"), {})  # noqa: S102  running the hint is the test
    finally:
        if saved is None:
            sys.modules.pop("datasets", None)
        else:
            sys.modules["datasets"] = saved
    assert len(calls) == 1, command
    return calls[0]


def test_the_data_stage_calls_load_dataset_with_the_arguments_the_hint_passes():
    """The hint mirrors data/hf_reader.py's call: if that call gains an argument, so must the hint."""
    source = (PACKAGE / "data" / "hf_reader.py").read_text(encoding="utf-8")
    call = between(source, "datasets.load_dataset(", "streaming=source.streaming)") + "streaming=source.streaming"
    assert re.sub(r"\s+", " ", call) == ("str(path), name=source.subset, revision=source.revision, "
                                        "data_files=source.data_files, split=source.split, "
                                        "streaming=source.streaming"), call


def test_lm_eval_offline_hint_fetches_the_config(monkeypatch):
    from langadapt.evaluation.lm_eval_bridge import fetch_hint

    hint = fetch_hint("ltg/noreval", "norquad")
    call = run_dataset_fetch(between(hint, "HF_HOME=DIR ", ", then copy"))
    assert call == (("ltg/noreval", "norquad"), {})
    assert (REPO / "eval" / "README.md").is_file()


@pytest.mark.parametrize("revision", [None, "v0.3"])
def test_offline_base_model_hint_is_hf_download_with_the_revision(revision):
    from huggingface_hub.errors import OfflineModeIsEnabled

    from langadapt.run.base_model import hub_failure

    line = hub_failure("mistralai/Mistral-7B-v0.1", OfflineModeIsEnabled("offline"), revision)
    command = between(line, "`", "`")
    assert words(command)[:3] == ["hf", "download", "mistralai/Mistral-7B-v0.1"]
    assert ("--revision" in command) == (revision is not None)
    check_external(command)


def test_prepared_dataset_cache_is_found_under_the_name_datasets_gives_it(monkeypatch, tmp_path):
    """`datasets` prepares uonlp/CulturaX into `uonlp___cultura_x`: after the hint ran, preflight finds it."""
    from datasets import config

    from langadapt.run.base_model import hub_dataset_cached

    monkeypatch.setattr(config, "HF_DATASETS_CACHE", tmp_path)
    assert not hub_dataset_cached("uonlp/CulturaX")
    (tmp_path / "uonlp___cultura_x" / "no" / "0.0.0" / "abc").mkdir(parents=True)
    assert hub_dataset_cached("uonlp/CulturaX")


def test_licence_guard_hint_sets_a_key_the_recipe_has():
    from langadapt.export.provenance import check_licence
    from langadapt.recipe.export import ExportConfig

    facts = types.SimpleNamespace(sources=[types.SimpleNamespace(name="wiki", restrictive_licences=["CC BY-SA"])])
    with pytest.raises(LangadaptError) as caught:
        check_licence(ExportConfig(), facts, {})
    item = shlex.split(str(caught.value).split("--set ", 1)[1])[0]
    assert item.startswith("export.license=")
    check_set_items([item])


def test_next_command_after_until_parses_and_keeps_the_overrides():
    args = Namespace(recipe=str(RECIPE), overrides=["stage2.steps=100", "name=my-run"], only=None, until="tokenizer")
    line = run_outcome(args, Path("runs/x"), [("tokenizer", "ran"), ("embeddings", "not selected")])
    parsed = check_langadapt(line.split("next: ", 1)[1])
    assert parsed.command == "run" and parsed.overrides == args.overrides


def test_plan_recommendation_sets_keys_the_recipe_has():
    from langadapt.planning.recipe_plan import plan_recipe

    recipe = load_recipe(REPO / "recipes" / "normistral_11b_warm.yaml").recipe
    rec = plan_recipe(recipe)["recommendation"]
    assert rec["set"], rec
    load_recipe(REPO / "recipes" / "normistral_11b_warm.yaml", rec["set"])


@pytest.mark.parametrize("hint", [
    "langadapt run RECIPE --until embeddings",
    "langadapt run RECIPE --until tokenizer",
    "langadapt run RECIPE",
    "langadapt launch RECIPE --slurm --sweep KEY=V1,V2",
    "langadapt sweep-report SWEEP",
])
def test_fixed_langadapt_hints_parse(hint):
    check_langadapt(hint)


def test_wandb_sync_hint_names_the_folder_the_run_lands_in(tmp_path):
    from langadapt.run.layout import RunLayout
    from langadapt.run.trackers import final_folder, landed, wandb_sync_command

    layout = RunLayout(tmp_path / "run")
    work = layout.work_dir("evaluate")
    building = layout.building("evaluate", work)
    final = final_folder(building, work)
    assert final == tmp_path / "run" / "evaluate"
    assert final_folder(building, layout.stage_dir("stage2")) is None  # training stages write in place
    command = wandb_sync_command(landed(work / "wandb" / "offline-run-1-abc", work, final))
    assert ".partial" not in command and words(command) == ["wandb", "sync", str(final / "wandb" / "offline-run-1-abc")]
    check_external(command)


# --- the data readers' conversions, run for real ---

def test_iconv_hint_converts_a_latin1_file(tmp_path):
    from collections import Counter

    from langadapt.data.sources import iter_texts
    from langadapt.recipe.data import SourceConfig

    if shutil.which("iconv") is None:
        pytest.skip("iconv is not installed here")
    for name, opener in (("notes.txt", open), ("notes.txt.gz", gzip.open)):
        path = tmp_path / name
        with opener(path, "wb") as out:
            out.write("blåbær og rødgrøt\n".encode("latin-1"))
        source = SourceConfig.model_validate({"name": "nb", "path": str(path), "lang": "nb"})
        with pytest.raises(LangadaptError, match="invalid UTF-8") as refused:
            list(iter_texts(source, [path], "error", Counter()))
        command = between(str(refused.value), "convert the file to UTF-8 (", "), or set")
        subprocess.run(command, shell=True, check=True, timeout=60)
        converted = tmp_path / (name.split(".")[0] + ".utf8" + "".join(Path(name).suffixes))
        data = converted.read_bytes()
        text = (gzip.decompress(data) if name.endswith(".gz") else data).decode("utf-8")
        assert text == "blåbær og rødgrøt\n", command


def test_jq_hint_turns_a_json_array_into_json_lines(tmp_path):
    if shutil.which("jq") is None:
        pytest.skip("jq is not installed here")
    source = (PACKAGE / "data" / "sources.py").read_text(encoding="utf-8")
    assert "jq -c '.[]' {path}" in source
    path = tmp_path / "docs.json"
    path.write_text(json.dumps([{"text": "a"}, {"text": "b c"}]))
    done = subprocess.run(f"jq -c '.[]' {shlex.quote(str(path))}", shell=True, check=True, capture_output=True,
                          text=True, timeout=60)
    assert [json.loads(line) for line in done.stdout.splitlines()] == [{"text": "a"}, {"text": "b c"}]


@pytest.mark.parametrize("tool, suffix", [("gzip", ".gz"), ("zstd", ".zst")])
def test_integrity_check_hints_tell_a_good_file_from_a_cut_one(tmp_path, tool, suffix):
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed here")
    where = PACKAGE / "inputs" / ("text.py" if tool == "gzip" else "compression.py")
    assert f"{tool} -t {{" in where.read_text(encoding="utf-8")
    plain = tmp_path / "corpus.txt"
    plain.write_text("Ein tekst.\n" * 2000)
    subprocess.run([tool, "-q", "-k", str(plain)], check=True, timeout=60)
    packed = plain.with_name(plain.name + suffix)
    assert subprocess.run([tool, "-t", str(packed)], check=False, capture_output=True, timeout=60).returncode == 0
    packed.write_bytes(packed.read_bytes()[:-8])
    assert subprocess.run([tool, "-t", str(packed)], check=False, capture_output=True, timeout=60).returncode != 0


@pytest.mark.parametrize("command", ["apt-get download debian-handbook", "sbatch --parsable job.sbatch",
                                     "hf auth login"])
def test_other_external_hints_exist(command):
    check_external(command)


# --- the whole list ---

TOOLS_CHECKED = {"hf", "wandb", "pip", "gzip", "zstd", "zcat", "zstdcat", "iconv", "jq", "apt-get", "sbatch",
                 "langadapt", "python"}
COMMAND_LIKE = re.compile(r"(?:^|[`(:;]\s*|run:?\s+|with\s+|e\.g\.\s+)(huggingface-cli|hf|wandb|pip|gzip|zstd|zcat|"
                          r"zstdcat|iconv|jq|apt-get|sbatch|langadapt|tensorboard|mlflow|python)\s+[-a-z]")


def printed_strings(tree: ast.AST) -> list[ast.Constant]:
    """String constants that are not docstrings or bare-expression comments (what can be printed)."""
    prose = {id(node.value) for node in ast.walk(tree)
             if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    return [node for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose]


def test_every_command_in_the_source_names_a_tool_this_file_checks():
    """A hint for a tool not checked here (or `huggingface-cli`) fails until this file checks it."""
    unchecked = []
    for path in PACKAGE.rglob("*.py"):
        for node in printed_strings(ast.parse(path.read_text(encoding="utf-8"))):
            if True:
                unchecked += [f"{path.relative_to(REPO)}:{node.lineno}: {m.group(1)}"
                              for m in COMMAND_LIKE.finditer(node.value) if m.group(1) not in TOOLS_CHECKED]
                if "huggingface-cli" in node.value:
                    unchecked.append(f"{path.relative_to(REPO)}:{node.lineno}: huggingface-cli")
    assert not unchecked, unchecked


@pytest.mark.slow  # over 2 s: not in the fast tier (tests/durations.json not yet refreshed)
def test_evaluate_stage_wandb_run_logs_a_sync_command_for_the_final_folder(tmp_path, monkeypatch, caplog):
    """The real tracker, offline: W&B itself is silenced (it would name `.evaluate.partial/`), and
    the logged `wandb sync` path exists once the work folder is renamed as the pipeline does."""
    pytest.importorskip("wandb")
    from langadapt.run.layout import RunLayout
    from langadapt.run.trackers import WandbTracker, final_folder

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    layout = RunLayout(tmp_path / "run")
    work = layout.work_dir("evaluate")
    work.mkdir(parents=True)
    tracker = WandbTracker(work, "run/stage2", None, None, lands_in=final_folder(layout.building("evaluate", work), work))
    tracker.summarize({"eval/base/nb/bits_per_byte": 1.0})
    with caplog.at_level("INFO", logger="langadapt"):
        tracker.close()
    line = next(r.getMessage() for r in caplog.records if "wandb sync" in r.getMessage())
    command = line.split("with: ", 1)[1]
    work.rename(layout.stage_dir("evaluate"))
    assert ".partial" not in command and Path(words(command)[2]).is_dir(), line
    check_external(command)


def test_every_set_key_written_in_the_source_is_a_recipe_key():
    """`--set a.b=...` inside a printed string (launch's help, the CLI's example, an error's
    advice) names a key the schema has; a placeholder value (`N`, `...`) is fine."""
    from langadapt.recipe.hints import schema_field

    keys = []
    for path in PACKAGE.rglob("*.py"):
        for node in printed_strings(ast.parse(path.read_text(encoding="utf-8"))):
            keys += [(f"{path.relative_to(REPO)}:{node.lineno}", m.group(1))
                     for m in re.finditer(r"--set '?([a-z_][a-z0-9_.\[\]]*\.[a-z0-9_.\[\]]+)=", node.value)]
    assert keys, "the scan found no --set key: the scan is broken"
    wrong = []
    for where, key in keys:
        try:
            schema_field(key)
        except ValueError as exc:
            wrong.append(f"{where}: {exc}")
    assert not wrong, wrong
