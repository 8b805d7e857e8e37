#!/usr/bin/env bash
# GPU check (needs an NVIDIA GPU, CUDA PyTorch and the MPS binaries): the GPU tests, then a small campaign of
# 4 workloads in `timeslice` and `mps` modes into one dataset folder, printing the slowdown matrices.
# Budget: under 8 minutes on one H100/H200-class GPU. Usage: bash scripts/gpu_check.sh [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-${OUT:-/tmp}/sharewise-gpu-check}
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
if [ ! -x .venv/bin/python ]; then
  # Use the machine's CUDA torch when it has one; never pull the CPU wheel here.
  "$PY" -m venv --system-site-packages .venv
  .venv/bin/pip install -q --no-deps -e . || exit 1
  .venv/bin/pip install -q xgboost-cpu typer rich pandas pyarrow scikit-learn matplotlib psutil nvidia-ml-py pytest \
    2>/dev/null || true
fi
nvidia-smi --query-gpu=name,memory.total,compute_mode --format=csv || { echo "no NVIDIA GPU visible"; exit 1; }
.venv/bin/python -c "import torch; assert torch.cuda.is_available(), 'torch has no CUDA'; print('torch', torch.__version__, torch.cuda.get_device_name(0))" || exit 1
rc=0
timeout 150 .venv/bin/python -m pytest -q -m gpu tests || rc=1
WL=resnet18,bert,lstm_lm,ncf
for mode in timeslice mps; do
  timeout 150 .venv/bin/sharewise pairs -w "$WL" --device cuda:0 --mode "$mode" --size full --window 1.0 \
    --repeats 3 --timeout 120 --out "$OUT" || rc=1
done
.venv/bin/sharewise show "$OUT"
exit $rc
