#!/usr/bin/env bash
# The engine measurements on one GPU, in one call: every engine and ZeRO stage on the 1.1B Llama
# and on Mistral-7B's layer shapes (stage 2 and the frozen-body stage 1), each against the torch
# engine, with MFU and the plan's memory beside the measured peak (benchmarks/README.md,
# "What the next GPU session measures"). Logs and each run's last JSON line go to $OUT when set
# (the device tool's folder), else to /tmp/langadapt-gpu-engines/.
#
#   bash benchmarks/gpu_engines.sh            # both presets (about 20 minutes on an H100)
#   bash benchmarks/gpu_engines.sh gpu-1b     # one preset
#
# Installs what the machine lacks as tests/gpu/run.sh does (.whl/ wheels on an offline machine).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
PYTHON=${PYTHON:-python3}
OUT=${OUT:-/tmp/langadapt-gpu-engines}
mkdir -p "$OUT"

# shellcheck source=tests/gpu/setup.sh
source tests/gpu/setup.sh || exit 2

status=0
for preset in "${@:-gpu-1b gpu-7b-shape}"; do
  for name in $preset; do
    case "$name" in
      gpu-1b) args=(--rounds 1 --skip-core --deepspeed 1 2 3 --deepspeed-bf16-gradients --fsdp --engine-stages stage1 stage2) ;;
      gpu-7b-shape) args=(--rounds 1 --deepspeed 1 2 3 --fsdp --engine-stages stage1 stage2) ;;
      *) echo "unknown preset $name (gpu-1b, gpu-7b-shape)"; exit 2 ;;
    esac
    echo "== $name: $PYTHON benchmarks/train_throughput.py --preset $name ${args[*]}"
    "$PYTHON" benchmarks/train_throughput.py --preset "$name" "${args[@]}" 2>&1 | tee "$OUT/train_throughput-$name.log"
    code=${PIPESTATUS[0]}
    [ "$code" -eq 0 ] || status=$code
    tail -n 1 "$OUT/train_throughput-$name.log" > "$OUT/train_throughput-$name.json"
  done
done
exit "$status"
