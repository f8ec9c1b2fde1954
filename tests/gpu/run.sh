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

if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/langadapt-site .whl/*.whl || exit 2
  export PYTHONPATH="/tmp/langadapt-site${PYTHONPATH:+:$PYTHONPATH}"
else
  "$PYTHON" -m pip install -q -e ".[gpu]" || exit 2
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # langadapt from this checkout
if [ ! -f corpora/build/nb.debian-handbook.jsonl.gz ]; then
  "$PYTHON" corpora/build.py --all || echo "corpora/build could not be built here: the demo tests will skip"
fi

"$PYTHON" -c "import torch; assert torch.cuda.is_available(), 'no GPU visible to torch'" || exit 2
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || rocm-smi 2>/dev/null | head -5

start=$(date +%s)
"$PYTHON" -m pytest -v -rs --durations=0 --junitxml=/tmp/langadapt-gpu-junit.xml "${@:-tests/gpu}" 2>&1 | tee /tmp/langadapt-gpu.log
status=${PIPESTATUS[0]}
"$PYTHON" tests/gpu/record.py /tmp/langadapt-gpu-junit.xml "$(( $(date +%s) - start ))" >> tests/gpu/RESULTS.md
if [ -n "${OUT:-}" ]; then cp tests/gpu/RESULTS.md /tmp/langadapt-gpu.log /tmp/langadapt-gpu-junit.xml "$OUT"/; fi
exit "$status"
