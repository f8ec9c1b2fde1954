"""The CLI's surface: every command's `--help` is a committed snapshot, and nothing (help, messages,
README, docs) names a flag its command does not have.

A change to the CLI shows up as a diff of tests/snapshots/cli_help/*.txt in review. Regenerate them
deliberately with LANGADAPT_UPDATE_SNAPSHOTS=1 (as the golden losses with LANGADAPT_UPDATE_GOLDEN=1).
New knobs belong in the recipe and `--set KEY.PATH=VALUE`, not in new flags.
"""

from __future__ import annotations

import argparse
import ast
import functools
import os
import re
from pathlib import Path

import pytest

from langadapt.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
SNAPSHOTS = REPO / "tests" / "snapshots" / "cli_help"
FLAG = re.compile(r"(?<![=\w-])--[a-z][a-z-]*[a-z]")
"""A long option, not one inside another option's value (`--sbatch=--exclusive`)."""


def commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {"langadapt": parser, **sub.choices}


@functools.cache
def flags() -> dict[str, set[str]]:
    """Each command's long options (the top-level ones, --debug, go before any command)."""
    found = {name: {o for a in p._actions for o in a.option_strings} for name, p in commands().items()}
    return {name: options | found["langadapt"] for name, options in found.items()}


COMMAND = re.compile(r"(?:^|(?<=langadapt )|(?<=`))(" + "|".join(re.escape(c) for c in flags() if c != "langadapt")
                     + r")(?= )")
"""A command named: at the start of a message (`launch --steps 7: ...`), after `langadapt ` or a backtick."""


def unknown_flags(text: str, command: str | None = None) -> list[str]:
    """`CMD --flag` mentions in `text` whose command has no such flag (up to a closing backtick);
    text before the first command named is `command`'s own (a help page), or not checked (None)."""
    known = flags()
    parts = COMMAND.split(text)
    pairs = ([(command, parts[0])] if command else []) + list(zip(parts[1::2], parts[2::2]))
    return [f"{cmd} {flag}" for cmd, segment in pairs
            for flag in FLAG.findall(segment.split("`")[0]) if flag not in known[cmd]]


@pytest.fixture()
def plain_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Help wrapped at a fixed width, without colour, whatever terminal runs the tests."""
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("PYTHON_COLORS", "0")


@pytest.mark.parametrize("name", list(commands()))
def test_help_matches_its_snapshot(name: str, plain_terminal: None) -> None:
    text = commands()[name].format_help()
    snapshot = SNAPSHOTS / f"{name}.txt"
    if os.environ.get("LANGADAPT_UPDATE_SNAPSHOTS") == "1":
        snapshot.parent.mkdir(parents=True, exist_ok=True)
        snapshot.write_text(text, encoding="utf-8")
    assert snapshot.is_file(), f"no snapshot for `{name} --help`: run with LANGADAPT_UPDATE_SNAPSHOTS=1"
    assert text == snapshot.read_text(encoding="utf-8"), (
        f"`{name} --help` changed: review it, then regenerate with LANGADAPT_UPDATE_SNAPSHOTS=1")


def test_every_snapshot_is_a_command() -> None:
    assert sorted(p.stem for p in SNAPSHOTS.glob("*.txt")) == sorted(commands())


@pytest.mark.parametrize("name", list(commands()))
def test_help_names_only_flags_that_exist(name: str, plain_terminal: None) -> None:
    assert unknown_flags(commands()[name].format_help(), None if name == "langadapt" else name) == []


def test_messages_name_only_flags_that_exist() -> None:
    """An error or hint like `launch --submit: ...` must name a flag `launch` has."""
    found = []
    for path in sorted((REPO / "langadapt").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found += [f"{path.relative_to(REPO)}:{node.lineno}: {m}"
                          for m in unknown_flags(node.value)]
    assert found == []


def test_readme_and_docs_name_only_flags_that_exist() -> None:
    found = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            found += [f"{path.name}:{number}: {m}" for m in unknown_flags(line.partition("langadapt ")[2])
                      if "langadapt " in line]
    assert found == []


def test_the_check_sees_a_missing_flag() -> None:
    assert unknown_flags("launch --submit: sbatch not found") == ["launch --submit"]
    assert unknown_flags("see `langadapt plan RECIPE --gpus 8`") == ["plan --gpus"]
    assert unknown_flags("launch --sbatch=--exclusive --set x=1") == []
