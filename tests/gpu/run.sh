#!/usr/bin/env bash
# The GPU suite on a GPU machine: installs what the machine lacks, runs tests/gpu, and appends the
# results (date, device, versions, pass/fail and time per test) to tests/gpu/RESULTS.md.
#
#   bash tests/gpu/run.sh [pytest args, default: tests/gpu]
#
# Offline machines: put wheels of the missing packages in .whl/ (deepspeed, pydantic, datasets,
# liger-kernel, ...; see RESULTS.md for the list used) and the demo corpora in corpora/build
# (`python corpora/build.py --all` where apt-get works); online ones get them with pip and apt.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
PYTHON=${PYTHON:-python3}

# shellcheck source=tests/gpu/setup.sh
source tests/gpu/setup.sh || exit 2

start=$(date +%s)
"$PYTHON" -m pytest -v -rs --durations=0 --junitxml=/tmp/langadapt-gpu-junit.xml "${@:-tests/gpu}" 2>&1 | tee /tmp/langadapt-gpu.log
status=${PIPESTATUS[0]}
"$PYTHON" tests/gpu/record.py /tmp/langadapt-gpu-junit.xml "$(( $(date +%s) - start ))" >> tests/gpu/RESULTS.md
if [ -n "${OUT:-}" ]; then cp tests/gpu/RESULTS.md /tmp/langadapt-gpu.log /tmp/langadapt-gpu-junit.xml "$OUT"/; fi
exit "$status"
