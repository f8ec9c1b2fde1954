"""The plan as text: compute and energy per stage, data per source, memory per GPU per ZeRO stage / FSDP2."""

from __future__ import annotations

import textwrap
from typing import Any

from langadapt.planning.preparation import render_preparation


def _si(x: float) -> str:
    """3 significant digits with an SI suffix: 4.19B, 1.26e22 stays scientific above 1e15."""
    if abs(x) >= 1e15:
        return f"{x:.3g}"
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{suffix}"
    return f"{x:.3g}"


def _table(header: list[str], rows: list[list[str]], text_columns: int = 1) -> list[str]:
    """Names left-aligned (the first `text_columns`), numbers right-aligned, two spaces apart."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def fmt(row: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i < text_columns else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))
        )

    return [fmt(header), "  ".join("-" * w for w in widths), *[fmt(r) for r in rows]]


def render_plan(plan: dict[str, Any]) -> str:
    """The plan as readable tables: compute and energy, data per source and per language, memory per GPU."""
    sections = [_header(plan), _compute(plan), _batch(plan), render_preparation(plan["preparation"]) if plan.get("preparation") else [],
                _data(plan), _languages(plan), _memory(plan), _recommendation(plan.get("recommendation") or {}, plan["hardware"]["mfu"]),
                _warnings(plan)]
    return "\n\n".join("\n".join(section) for section in sections if section)


def _header(plan: dict[str, Any]) -> list[str]:
    m, hw = plan["model"], plan["hardware"]
    return [(f"Model {m['name']}: {_si(m['params'])} parameters ({_si(m['embedding_params'])} embeddings + head, "
             f"{_si(m['body_params'])} body), vocab {m['vocab']:,}"),
            (f"Hardware {hw['num_gpus']} x {hw['name']} ({hw['peak_tflops']:g} TFLOP/s bf16, {hw['watts']:g} W, "
             f"{hw['memory_gb']:g} GB) at {hw['mfu']:.0%} MFU; PUE {hw['pue']:g}, grid {hw['grid_g_per_kwh']:g} gCO2e/kWh")]


def _compute(plan: dict[str, Any]) -> list[str]:
    """Compute and energy per training stage, and their total."""
    rows = [[s["name"], s["trainable"], f"{s['steps']:,}", _si(s["tokens"]), _si(s["flops_per_token"]), _si(s["flops"]),
             f"{s['tokens_per_second_per_gpu']:,.0f}", f"{s['gpu_hours']:,.0f}", f"{s['wall_hours']:,.1f}",
             f"{s['energy_kwh']:,.0f}", f"{s['co2_kg']:,.0f}"] for s in plan["stages"]]
    t = plan["total"]
    rows.append(["total", "", "", _si(t["tokens"]), "", _si(t["flops"]), "", f"{t['gpu_hours']:,.0f}",
                 f"{t['wall_hours']:,.1f}", f"{t['energy_kwh']:,.0f}", f"{t['co2_kg']:,.0f}"])
    header = ["stage", "trains", "steps", "tokens", "FLOP/tok", "FLOPs", "tok/s/GPU", "GPU-h", "wall-h", "kWh", "kg CO2e"]
    return _table(header, rows, text_columns=2)


def _batch(plan: dict[str, Any]) -> list[str]:
    """Each stage's global batch as training resolves it (`planning.training.resolve_training`), and
    whether the recipe fixes it or it follows the world size."""
    lines = []
    for s in plan["stages"]:
        one = s.get("settings")
        if not one:
            continue
        how = (f"fixed by {s['name']}.global_batch_size" if one.get("global_batch_fixed")
               else f"grows with the world size; {s['name']}.global_batch_size fixes it")
        lines.append(f"{s['name']}  global batch {one['global_batch']:,} sequences = micro {one['micro_batch']} x "
                     f"accum {one['grad_accum']} x {one['world_size']} GPUs ({how})")
    return lines


def _data(plan: dict[str, Any]) -> list[str]:
    """Tokens and epochs per source of each stage's mixture (D'/D: the repetition-discounted data ratio)."""
    rows = [[s["name"], src["name"], _si(src["tokens"]), f"{src['epochs']:.2f}", f"{src['effective_ratio']:.3f}"]
            for s in plan["stages"] if s["mixture"] for src in s["mixture"]["sources"]]
    return _table(["stage", "source", "tokens", "epochs", "D'/D"], rows, text_columns=2) if rows else []


def _languages(plan: dict[str, Any]) -> list[str]:
    rows = [[row["stage"], row["lang"], row["role"], _si(row["tokens"]), f"{row['share']:.1%}"]
            for row in plan.get("languages", [])]
    return _table(["stage", "lang", "role", "tokens", "share"], rows, text_columns=3) if rows else []


def _memory(plan: dict[str, Any]) -> list[str]:
    """Memory per GPU for every sharding layout of every stage; * marks the one the recipe sets."""
    rows = []
    for s in plan["stages"]:
        for layout, v in s["memory_gb"].items():
            mark = "*" if layout == s["memory_layout"] else ""
            rows.append([f"{s['name']}{mark}", "FSDP2" if layout == "fsdp" else layout.replace("zero", "ZeRO-"),
                         *(f"{v[k]:.1f}" for k in ("weights", "gradients", "optimizer", "buffers", "activations", "total")),
                         "yes" if v["fits"] else "NO"])
    title = f"Memory per GPU, GB (* = the stage's engine setting; fits in {plan['hardware']['memory_gb']:g} GB?)"
    return [title, *_table(["stage", "sharding", "weights", "grads", "optim", "buffers", "activ", "total", "fits"],
                           rows, text_columns=2)]


def _recommendation(rec: dict[str, Any], mfu: float) -> list[str]:
    """The engine settings the planner would pick, as --set flags, or why nothing fits. Its GPU-hours
    differ from the table's total, and the line says why: the table gives every layout the same MFU,
    the recommendation each layout's measured speed (planning.plan.LAYOUT_SPEED)."""
    if rec.get("engine"):
        speed = rec["speedup_vs_recipe"]
        verdict = "the recipe's settings" if abs(speed - 1) < 1e-9 else f"{speed:.2f}x faster than the recipe's settings"
        return [f"Recommended ({verdict}):", "  " + " ".join("--set " + s for s in rec["set"]),
                (f"  {rec['gpu_hours']:,.0f} GPU-h with each layout at its measured speed (the table above runs "
                 f"every layout at {mfu:.0%} MFU)"),
                *textwrap.wrap(f"why: {rec['reason']}", 110, initial_indent="  ", subsequent_indent="    ")]
    if rec:
        return textwrap.wrap(f"Recommended: nothing fits: {rec['reason']}", 110, subsequent_indent="  ")
    return []


def _warnings(plan: dict[str, Any]) -> list[str]:
    warnings = [f"{s['name']}: {w}" for s in plan["stages"] for w in s["warnings"]]
    warnings += plan.get("notes", [])
    warnings += [f"preparation: {w}" for w in (plan.get("preparation") or {}).get("warnings", [])]
    return [f"warning: {w}" for w in warnings]
