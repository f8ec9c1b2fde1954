# Sourced by tests/gpu/run.sh and benchmarks/gpu_engines.sh from the repository root, with PYTHON
# set: installs what a GPU machine lacks (from .whl/ when it is offline), puts this checkout on
# PYTHONPATH, and stops (return 2) unless torch sees a GPU.
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/langadapt-site .whl/*.whl || return 2
  export PYTHONPATH="/tmp/langadapt-site${PYTHONPATH:+:$PYTHONPATH}"
else
  "$PYTHON" -m pip install -q -e ".[gpu]" || return 2
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # langadapt from this checkout
if [ ! -f corpora/build/nb.debian-handbook.jsonl.gz ]; then
  "$PYTHON" corpora/build.py --all || echo "corpora/build could not be built here: the demo tests will skip"
fi

"$PYTHON" -c "import torch; assert torch.cuda.is_available(), 'no GPU visible to torch'" || return 2
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || rocm-smi 2>/dev/null | head -5

