"""Render the report once as a list of blocks, then as Markdown or as self-contained HTML.

Building the content once keeps the two formats from drifting apart; each renderer only knows
how to draw a heading, a paragraph, a list, a table, a figure and a text sample.
"""

from __future__ import annotations

import html
import unicodedata
from pathlib import Path

from langadapt.evaluation import tables
from langadapt.evaluation.token_cost import cost_line
from langadapt.evaluation.tradeoff import forgetting_origin, tradeoff
from langadapt.evaluation.uniform import uniform_line

Block = tuple
"""("h1"|"h2"|"h3"|"p", text) | ("ul", [(text, css class)]) | ("table", header, rows) | ("img", key, alt)."""
TRAINING_NOTE = (
    "tokens/s: over the training steps (checkpoints and validation excluded); wall time: the whole stage, "
    "loading and saving included. FLOPs: 6N per token (+ attention) for all weights, 4N + 2N(head) with the "
    "body frozen, as `langadapt plan` counts them."
)
"""What the training table's measures mean (under the table)."""
SAMPLE_HEADER = ["model", "continuation"]
"""Header of the sample tables (their text cells are set in a monospace font)."""
TEXT_HEADER = ["", "text"]
"""Header of the translation example tables (source, reference, each model's translation)."""
TEXT_TABLES = (SAMPLE_HEADER, TEXT_HEADER)
"""Tables whose second column is text to read, not a number: monospace, left-aligned in HTML."""


def _capped_note(meta: dict) -> str:
    """When a model's context length capped the window: what the recipe asked for."""
    asked = meta.get("window_requested")
    return "" if asked is None or asked == meta.get("window") else (
        f" (evaluation.window asks {asked}; capped at the model's context length)")


def build_blocks(results: dict, title: str, figures: set[str]) -> list[Block]:
    """The report's content, in reading order: the answer first, method details last."""
    models, ref, meta = list(results["models"]), results.get("reference"), results.get("meta", {})
    head = tables.headline_model(results)
    blocks: list[Block] = [("h1", title), *_tradeoff_blocks(results)]
    against = f" Reference: {ref}." if ref is not None and len(models) > 1 else ""
    blocks.append(("p", f"{'Models' if len(models) > 1 else 'Model'}: {', '.join(models)}.{against}"
                        + (f" Window {meta.get('window')} tokens{_capped_note(meta)}, stride {meta.get('stride')}."
                           if meta.get("window") is not None and results.get("langs") else "")))
    if road := tables.tokenizer_road(results):
        blocks.append(("p", road))
    changes = tables.verdicts(results) if head else []
    if changes:
        blocks += [("h2", f"What changed: {head} vs {ref}"), ("ul", changes)]
    header, rows = tables.bpb_rows(results)
    if rows:  # none: e.g. an lm-eval-only suite, or `langadapt eval FOLDER` without held-out text (see the notes)
        blocks += [
            ("h2", "Held-out bits per byte"),
            ("table", header, rows),
            ("p", tables.BPB_NOTE),
            *([("p", uniform)] if (uniform := uniform_line(results)) else []),
            ("img", "bpb", "bits per byte per language and model"),
            ("img", "deltas", "bpb deltas vs reference"),
        ]
    task_table = tables.task_rows(results)
    if task_table is not None:
        blocks += [("h2", "Tasks"), ("table", *task_table)]
        blocks += [("p", note) for note in tables.task_notes(results)]
        blocks += _translation_blocks(results)
    blocks += _tokenizer_blocks(results)
    blocks += _training_blocks(results, figures)
    blocks += _sample_blocks(results)
    blocks += _data_blocks(results)
    return blocks


def _tradeoff_blocks(results: dict) -> list[Block]:
    """The answer, as the first table: the target's gain and the largest forgetting (`tradeoff`),
    then what a target token costs with the run's tokenizer (`token_cost`)."""
    found, cost = tradeoff(results), cost_line(results)
    blocks: list[Block] = [("p", found.headline()), ("table", *found.table())] if found is not None else []
    origin = forgetting_origin(results, found) if found is not None else None
    return blocks + [("p", line) for line in (origin, cost) if line]


def _training_blocks(results: dict, figures: set[str]) -> list[Block]:
    """Each stage's settings and speed, every trained model's loss curves, the held-out curve during
    training with its verdict per language, energy."""
    training = results.get("training") or {}
    blocks: list[Block] = []
    if training.get("stages"):
        header, rows = training["stages"]
        blocks += [("table", header, rows),
                   ("p", TRAINING_NOTE)]
    if "training" in figures:
        blocks.append(("img", "training", "training loss of every trained model over tokens seen"))
    if "training_flops" in figures:
        blocks.append(("img", "training_flops", "training loss of every trained model over training FLOPs"))
    if "validation" in figures:
        blocks += [("h3", "Held-out bits per byte during training"),
                   ("img", "validation", "held-out bits per byte per language during training"),
                   ("ul", [(f["text"], tables.LOSS if f["hurt"] else tables.NEUTRAL)
                           for f in training.get("validation", [])])]
    if training.get("energy"):
        note = training.get("energy_note") or "no plan estimate"
        blocks += [("h3", "Energy per optimizer step"),
                   ("table", ["stage", "measured J/step", "plan J/step", "measured / plan"], training["energy"]),
                   ("p", (f"Measured: the device's energy counter (NVML, amdsmi or RAPL) on the logging rank, "
                         f"times the world size; checkpoint and validation time excluded. {note}; device power "
                         "only (no PUE)."))]
    return [("h2", "Training"), *blocks] if blocks else []


def _tokenizer_blocks(results: dict) -> list[Block]:
    tok_table = tables.tokenizer_rows(results)
    shortfall = (results.get("tokenizers") or {}).get("shortfall")
    blocks: list[Block] = [("p", f"Note: {shortfall}.")] if shortfall else []
    if tok_table is not None:
        used_by = (results.get("tokenizers") or {}).get("used_by", {})
        users = "; ".join(f"{name} tokenizer: {', '.join(models)}" for name, models in used_by.items())
        blocks += [
            ("p", f"Used by — {users}. Fertility = tokens per word (lower is better)."),
            ("table", *tok_table),
            ("img", "fertility", "tokenizer fertility per language"),
        ]
    return [("h2", "Tokenizers"), *blocks] if blocks else []


def _translation_blocks(results: dict) -> list[Block]:
    """The first pairs of each translation direction with every model's translation beside the
    source and reference: what a chrF of 12 looks like. The files named hold all of them."""
    blocks: list[Block] = []
    for key, task in (results.get("translations") or {}).items():
        for direction, examples in (task.get("examples") or {}).items():
            files = sorted({per[direction] for per in task.get("files", {}).values() if direction in per})
            where = files[0].rsplit("/", 1)[0] + "/" if files else "translations/"
            blocks.append(("h3", f"Translations: {key}, {direction} (the first {len(examples)}; "
                                 f"every one in {where})"))
            for example in examples:
                rows = [["source", visible(example["source"])], ["reference", visible(example["reference"])]]
                rows += [[model, visible(text)] for model, text in example["hypotheses"].items()]
                blocks.append(("table", TEXT_HEADER, rows))
    return blocks


def _sample_blocks(results: dict) -> list[Block]:
    """One small table per prompt, a row per model, so the continuations of a prompt sit together."""
    by_prompt: dict[tuple[str, str], list[list[str]]] = {}
    for model, per_lang in (results.get("samples") or {}).items():
        for lang, items in per_lang.items():
            for item in items:
                # "…" marks the join, so a missing space after the prompt stays visible.
                continuation = visible(item["text"][len(item["prompt"]) :]).rstrip()
                by_prompt.setdefault((lang, item["prompt"]), []).append([model, "…" + continuation])
    if not by_prompt:
        return []
    blocks: list[Block] = [("h2", "Samples (fixed prompts and seed)")]
    for (lang, prompt), rows in by_prompt.items():
        blocks += [("h3", f"{lang}: {prompt.strip()} …"), ("table", SAMPLE_HEADER, rows)]
    return blocks


def visible(text: str) -> str:
    """Generated text made safe to print: newlines as ↵, other control characters as \\xNN.

    An early model happily samples byte tokens such as NUL; left raw they make report.md a
    "binary" file to grep and invisible in the HTML.
    """
    text = text.replace("\n", " ↵ ").replace("\t", " ")
    return "".join(f"\\x{ord(ch):02x}" if unicodedata.category(ch) == "Cc" else ch for ch in text)


def _data_blocks(results: dict) -> list[Block]:
    """What was scored and how; the held-out table only when held-out text was scored."""
    meta = results.get("meta", {})
    rows = [
        [lang, str(info["documents"]), f"{info['bytes']:,}", info["source"]]
        for lang, info in results.get("langs", {}).items()
    ]
    blocks: list[Block] = [("h2", "Held-out data and method" if rows else "Method")]
    if rows:
        blocks += [("table", ["lang", "documents", "bytes", "source"], rows),
                   ("p", f"At most {meta.get('max_bytes_per_lang') or 'all'} bytes per language."
                         + (f" Run data: the held-out (valid) split of {results['held_out_run']}."
                            if results.get("held_out_run") else ""))]
    blocks.append(("p", f"langadapt {meta.get('langadapt')}, torch {meta.get('torch')}, {meta.get('seconds', 0):.0f} s."))
    speed = tables.throughput_rows(results)
    if speed is not None:
        blocks += [("h3", "Scoring throughput"), ("table", *speed)]
    if results.get("notes"):
        blocks += [("h3", "Notes"), ("ul", [(note, tables.NEUTRAL) for note in results["notes"]])]
    return blocks


def render_markdown(results: dict, figures: dict[str, Path], out: Path, title: str) -> str:
    """GitHub-flavoured Markdown; figures are linked relative to the report."""
    lines: list[str] = []
    for block in build_blocks(results, title, set(figures)):
        kind = block[0]
        if kind in ("h1", "h2", "h3"):
            lines += ["#" * int(kind[1]) + " " + block[1], ""]
        elif kind == "p":
            lines += [block[1], ""]
        elif kind == "ul":
            lines += [f"- {text}" for text, _ in block[1]] + [""]
        elif kind == "table":
            header, rows = block[1], block[2]
            lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows] + [""]
        elif kind == "img" and block[1] in figures:
            lines += [f"![{block[2]}]({figures[block[1]].relative_to(out).as_posix()})", ""]
    return "\n".join(lines)


CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 1000px; margin: 2em auto;
       padding: 0 1em; color: #222; line-height: 1.45; }
h1 { border-bottom: 2px solid #ddd; padding-bottom: .3em; }
h2 { margin-top: 1.8em; border-bottom: 1px solid #eee; }
table { border-collapse: collapse; margin: .8em 0; font-size: 14px; }
th, td { border: 1px solid #ddd; padding: 4px 10px; text-align: right; }
th { background: #f4f4f4; } td:first-child, th:first-child { text-align: left; }
li.gain { color: #1d7a3a; } li.loss { color: #b03a22; }
img { max-width: 100%; margin: .6em 0; border: 1px solid #eee; }
table.samples th { text-align: left; }
td.text { text-align: left; white-space: pre-wrap; font-family: ui-monospace, monospace; font-size: 13px; }
"""


def render_html(results: dict, images: dict[str, str], title: str) -> str:
    """One HTML file with inline CSS and the figures embedded as data URIs (send it as it is)."""
    esc = html.escape
    body: list[str] = []
    for block in build_blocks(results, title, set(images)):
        kind = block[0]
        if kind in ("h1", "h2", "h3", "p"):
            body.append(f"<{kind}>{esc(block[1])}</{kind}>")
        elif kind == "ul":
            body.append("<ul>" + "".join(f'<li class="{c}">{esc(t)}</li>' for t, c in block[1]) + "</ul>")
        elif kind == "table":
            head = "".join(f"<th>{esc(h)}</th>" for h in block[1])
            cell = '<td class="text">{}</td>' if block[1] in TEXT_TABLES else "<td>{}</td>"
            rows = "".join("<tr>" + "".join(cell.format(esc(c)) for c in row) + "</tr>" for row in block[2])
            css = ' class="samples"' if block[1] in TEXT_TABLES else ""
            body.append(f"<table{css}><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif kind == "img" and block[1] in images:
            body.append(f'<img src="{images[block[1]]}" alt="{esc(block[2])}">')
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
        f"<style>{CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )
