"""Recipe loading: every shipped recipe validates; errors are one located line with a suggestion."""

from __future__ import annotations

from pathlib import Path

import pytest

from langadapt.errors import LangadaptError
from langadapt.recipe import Recipe, load_recipe
from langadapt.recipe.errors import Report
from langadapt.recipe.reference import markdown_reference, reference_rows

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "recipes").glob("*.yaml"))

MINIMAL = """\
name: t
init: scratch
base_model:
  architecture: {model_type: llama, hidden_size: 32}
data:
  sources:
    - {name: nb, path: x.jsonl, lang: nb}
tokenizer:
  vocab_size: 300
stage1:
  micro_batch_size: 4
  seq_len: 64
  optimizer: {lr: 0.001}
stage2:
  steps: 5
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "r.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_every_shipped_recipe_validates(path: Path) -> None:
    loaded = load_recipe(path)
    assert loaded.recipe.name
    assert loaded.resolved_yaml().startswith("name:")


def test_unknown_key_names_file_line_key_and_suggestion(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL.replace("  steps: 5", "  steps: 5\n  shedule: {kind: cosine}"))
    with pytest.raises(LangadaptError) as info:
        load_recipe(path)
    message = str(info.value)
    assert message == f"{path}:16: stage2.shedule: unknown key; did you mean schedule?"


def test_wrong_type_is_located(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL.replace("vocab_size: 300", "vocab_size: lots"))
    with pytest.raises(LangadaptError, match=r"r.yaml:9: tokenizer.vocab_size: .*integer.*'lots'"):
        load_recipe(path)


def test_list_items_are_located(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL.replace("lang: nb}", "lang: nb, wieght: 2}"))
    with pytest.raises(LangadaptError, match=r"data.sources\[0\].wieght: unknown key; did you mean weight\?"):
        load_recipe(path)


def test_missing_file_and_malformed_yaml(tmp_path: Path) -> None:
    with pytest.raises(LangadaptError, match="recipe file not found"):
        load_recipe(tmp_path / "nope.yaml")
    path = write(tmp_path, "name: [unclosed\n")
    with pytest.raises(LangadaptError, match=r"r.yaml:2: malformed YAML"):
        load_recipe(path)


def test_overrides_are_validated_like_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL)
    loaded = load_recipe(path, ["stage2.optimizer.lr=3e-4", "data.valid_fraction=0.1"])
    assert loaded.recipe.stage2.optimizer.lr == pytest.approx(3e-4)
    assert loaded.recipe.data.valid_fraction == pytest.approx(0.1)
    with pytest.raises(LangadaptError, match="stage2.optimiser: unknown key; did you mean optimizer"):
        load_recipe(path, ["stage2.optimiser.lr=1"])
    with pytest.raises(LangadaptError, match="expected key.path=value"):
        load_recipe(path, ["stage2.steps"])


def test_stage2_inherits_what_stage1_sets(tmp_path: Path) -> None:
    loaded = load_recipe(write(tmp_path, MINIMAL))
    stage1, stage2 = loaded.recipe.stage1, loaded.recipe.stage2
    assert stage2.micro_batch_size == stage1.micro_batch_size == 4
    assert stage2.seq_len == 64 and stage2.optimizer.lr == pytest.approx(0.001)
    assert stage2.steps == 5  # own key, never inherited
    assert loaded.inheritance == {"inherited": ["micro_batch_size", "optimizer.lr", "seq_len"],
                                  "overridden": []}


def test_stage2_inheritance_names_the_dotted_keys_it_took_and_the_ones_it_set(tmp_path: Path) -> None:
    """A stage 2 that sets `optimizer.lr` overrides that key alone and inherits the rest of stage 1's
    optimizer: the record (which the run logs when stage 2 starts) says so key by key."""
    stage1 = "optimizer: {lr: 0.001, weight_decay: 0.05, betas: [0.9, 0.95]}"
    text = MINIMAL.replace("optimizer: {lr: 0.001}", stage1)
    loaded = load_recipe(write(tmp_path, text + "  optimizer: {lr: 0.0003}\n  seq_len: 32\n"))
    assert loaded.recipe.stage2.optimizer.weight_decay == pytest.approx(0.05)
    assert loaded.recipe.stage2.optimizer.lr == pytest.approx(3e-4)
    assert loaded.inheritance == {
        "inherited": ["micro_batch_size", "optimizer.betas", "optimizer.weight_decay"],
        "overridden": ["optimizer.lr", "seq_len"]}


def test_a_problem_at_an_inherited_stage2_key_is_blamed_on_stage1s_line(tmp_path: Path) -> None:
    text = MINIMAL.replace("optimizer: {lr: 0.001}", "optimizer:\n    lr: 0.001\n    weight_decay: 0.05")
    path = write(tmp_path, text + "  optimizer: {lr: 0.0003}\n")
    loaded = load_recipe(path)
    report = Report(path, loaded.inheritance, loaded.overrides)
    report.add(("stage2", "optimizer", "weight_decay"), "too much")  # inherited from stage 1's line 15
    report.add(("stage2", "optimizer", "lr"), "too little")  # stage 2's own, line 18
    report.add(("stage2", "micro_batch_size"), "too many")  # inherited, line 11
    assert report.lines() == [
        f"{path}:15: stage2.optimizer.weight_decay (inherited from stage1.optimizer.weight_decay): too much",
        f"{path}:18: stage2.optimizer.lr: too little",
        f"{path}:11: stage2.micro_batch_size (inherited from stage1.micro_batch_size): too many",
    ]


def test_warm_needs_a_base_model(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL.replace("init: scratch", "init: warm"))
    with pytest.raises(LangadaptError, match="init: warm needs base_model.path"):
        load_recipe(path)


def test_every_field_is_documented() -> None:
    undocumented = [key for key, _, _, doc in reference_rows(Recipe) if not doc.strip()]
    assert undocumented == []
    assert "| `stage2.optimizer.lr` |" in markdown_reference(Recipe)


def test_reference_doc_matches_the_schema() -> None:
    doc = (REPO / "docs" / "recipe_reference.md").read_text()
    assert markdown_reference(Recipe) in doc, "regenerate: langadapt reference (see docs/recipe_reference.md)"
