#!/usr/bin/env bash
# The GPU suite on a GPU machine: installs what the machine lacks, runs tests/gpu, and appends the
# results (date, device, versions, pass/fail and time per test) to tests/gpu/RESULTS.md.
#
#   bash tests/gpu/run.sh [pytest args, default: tests/gpu]
#
# Device time (H100; setup = pip + corpora, 2-3 min): test_gpu_fast_paths.py ~2 min estimated (tiny
# models, ~5-20 s a case: one FSDP2 compile, three torchrun DeepSpeed workers at ~15 s of imports
# each, one 2-rank DDP run), test_gpu_kernels.py 2.5-4.5 min measured (first DeepSpeed build included),
# test_gpu_document_masking.py ~40 s, test_gpu_demo.py ~5 min. The whole suite is over one 600 s
# device call, so settle the fast paths first: LANGADAPT_GPU_SUITE_S=300 bash tests/gpu/run.sh
# tests/gpu/test_gpu_fast_paths.py tests/gpu/test_gpu_kernels.py. LANGADAPT_GPU_SUITE_S interrupts
# pytest (SIGINT) after that many seconds: what ran so far is still recorded and copied to $OUT.
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
timeout --signal=INT "${LANGADAPT_GPU_SUITE_S:-0}" "$PYTHON" -m pytest -v -rs --durations=0 --junitxml=/tmp/langadapt-gpu-junit.xml "${@:-tests/gpu}" 2>&1 | tee /tmp/langadapt-gpu.log
status=${PIPESTATUS[0]}
"$PYTHON" tests/gpu/record.py /tmp/langadapt-gpu-junit.xml "$(( $(date +%s) - start ))" >> tests/gpu/RESULTS.md
if [ -n "${OUT:-}" ]; then cp tests/gpu/RESULTS.md /tmp/langadapt-gpu.log /tmp/langadapt-gpu-junit.xml "$OUT"/; fi
exit "$status"
