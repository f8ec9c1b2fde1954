"""Slurm's compressed host and task lists, parsed without Slurm's binaries.

`SLURM_JOB_NODELIST="nid[005-007,010]"` and `SLURM_TASKS_PER_NODE="8(x2),4"` are how Slurm
tells a task where its peers are; `scontrol show hostnames` expands them, but the container a
task runs in often lacks Slurm's tools. Pure functions, tested on the forms Slurm prints.
"""

from __future__ import annotations

import re

from langadapt.errors import LangadaptError

SLURM_PORT_BASE, SLURM_PORT_SPAN = 20000, 20000
"""Under Slurm the port is BASE + job id % SPAN (in `distributed` and in the generated sbatch
scripts); here, in a torch-free module, so that `langadapt` can build its parser without torch."""


def expand_tasks_per_node(spec: str) -> list[int]:
    """Slurm's compressed task counts, e.g. "8(x2),4" -> [8, 8, 4]."""
    counts: list[int] = []
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not m:
            raise LangadaptError(f"cannot parse SLURM_TASKS_PER_NODE={spec!r} (expected e.g. '8(x2),4')")
        counts.extend([int(m.group(1))] * int(m.group(2) or 1))
    return counts


def expand_nodelist(nodelist: str) -> list[str]:
    """Expand a Slurm hostlist like "nid[005-007,010],gpu-a[1-2]-ib" into host names, in order.

    The same answer as `scontrol show hostnames`, without needing Slurm's binaries in the
    container: ranges keep their zero padding, several bracket groups in one name multiply out.
    """
    hosts: list[str] = []
    for name in _split_top_level(nodelist):
        hosts.extend(_expand_name(name))
    if not hosts:
        raise LangadaptError(f"empty Slurm nodelist {nodelist!r}")
    return hosts


def _split_top_level(nodelist: str) -> list[str]:
    """Split on commas outside brackets: "a[1,3],b" -> ["a[1,3]", "b"]."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(nodelist):
        depth += ch == "["
        depth -= ch == "]"
        if depth < 0 or depth > 1:
            raise LangadaptError(f"unbalanced brackets in Slurm nodelist {nodelist!r}")
        if ch == "," and depth == 0:
            parts.append(nodelist[start:i])
            start = i + 1
    if depth:
        raise LangadaptError(f"unbalanced brackets in Slurm nodelist {nodelist!r}")
    parts.append(nodelist[start:])
    return [p.strip() for p in parts if p.strip()]


def _expand_name(name: str) -> list[str]:
    """One hostlist item, possibly with several bracket groups ("x[1-2]c[0-1]")."""
    m = re.search(r"\[([^\]]*)\]", name)
    if not m:
        return [name]
    prefix, rest = name[: m.start()], name[m.end() :]
    out = []
    for item in m.group(1).split(","):
        lo, _, hi = item.strip().partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise LangadaptError(f"cannot parse range {item!r} in Slurm nodelist item {name!r}")
        width = len(lo)
        for n in range(int(lo), int(hi or lo) + 1):
            out.extend(prefix + str(n).zfill(width) + tail for tail in _expand_name(rest))
    return out
