"""Where a run folder really is (issue 32 item 6): inside another run it is refused, through a link
it is followed and the real place is said, each with the resolved path."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.cli import run_cli

SCRATCH = """\
name: {name}
run_root: {run_root}
init: scratch
base_model:
  architecture: {{model_type: llama, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1,
                 num_attention_heads: 2, num_key_value_heads: 1}}
data:
  force_epochs: true
  sources:
    - {{name: nb, path: {corpus}, lang: nb}}
tokenizer: {{kind: byte_bpe, vocab_size: 300}}
"""


def _recipe(tmp_path: Path, name: str, run_root: Path) -> Path:
    corpus = tmp_path / "nb.jsonl"
    if not corpus.exists():
        corpus.write_text("".join(json.dumps({"text": f"Dokument {i} om fjell og fjorder."}) + "\n" for i in range(200)))
    path = tmp_path / f"{name}.yaml"
    path.write_text(SCRATCH.format(name=name, run_root=run_root, corpus=corpus))
    return path


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("langadapt: error:")]


def test_a_run_root_inside_another_run_is_refused_with_both_paths(tmp_path: Path) -> None:
    outer = _recipe(tmp_path, "outer", tmp_path / "runs")
    assert run_cli("run", str(outer), "--until", "data").returncode == 0
    inner = _recipe(tmp_path, "inner", tmp_path / "runs" / "outer" / "nested")
    for args in (["--dry-run"], ["--until", "data"]):
        result = run_cli("run", str(inner), *args)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        lines = _errors(result.stderr)
        assert len(lines) == 1, result.stderr
        line = lines[0]
        assert "inside the folder of another run" in line and str(tmp_path / "runs" / "outer") in line
    assert not (tmp_path / "runs" / "outer" / "nested").exists()


def test_a_linked_run_folder_is_followed_and_its_real_place_said(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch" / "linked"
    scratch.mkdir(parents=True)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "linked").symlink_to(scratch)
    result = run_cli("run", str(_recipe(tmp_path, "linked", tmp_path / "runs")), "--until", "data")
    assert result.returncode == 0, result.stderr
    assert f"is a link: this run reads and writes {scratch}" in result.stderr + result.stdout
    assert (scratch / "data").is_dir()  # the work landed where the link points
