"""Append one run of the GPU suite to RESULTS.md (called by run.sh with the junit XML and seconds)."""

from __future__ import annotations

import datetime
import importlib.metadata
import sys
import xml.etree.ElementTree as ET

import torch


def version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def main(junit: str, seconds: str) -> None:
    cases = ET.parse(junit).getroot().iter("testcase")
    rows, counts = [], {"passed": 0, "failed": 0, "skipped": 0, "interrupted": 0}
    for case in cases:
        outcome = "failed" if case.find("failure") is not None or case.find("error") is not None else (
            "skipped" if case.find("skipped") is not None else "passed")
        # pytest interrupted by run.sh's LANGADAPT_GPU_SUITE_S leaves the running test without a name
        name, outcome = (case.get("name"), outcome) if case.get("name") else ("(running at the time limit)", "interrupted")
        counts[outcome] += 1
        rows.append(f"| {name} | {outcome} | {float(case.get('time', 0)):.1f} |")
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    print(f"\n## {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {device}\n")
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}, HIP {torch.version.hip}), transformers "
          f"{version('transformers')}, deepspeed {version('deepspeed')}, liger-kernel {version('liger-kernel')}; "
          f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped"
          f"{', interrupted at the time limit' if counts['interrupted'] else ''} in {seconds} s "
          "(`bash tests/gpu/run.sh`)\n")
    print("| test | result | seconds (setup included) |\n| --- | --- | --- |")
    print("\n".join(rows))


if __name__ == "__main__":
    main(*sys.argv[1:])
