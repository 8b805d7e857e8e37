#!/usr/bin/env bash
# GPU check on one NVIDIA GPU: a smoke test of the CUDA path, the @pytest.mark.gpu tests, then a small pair
# campaign (3 workloads, 6 pairs) in `timeslice` mode and, where NVIDIA MPS is installed, `mps` mode on 2 workloads.
# Every stage has its own time limit and the campaign saves each pair as it finishes, so a stage cut short still
# leaves its measurements. Logs and the dataset (one .tgz) go to OUT_DIR.
#
# Usage: bash scripts/gpu_check.sh [OUT_DIR] [STAGES]      STAGES: any of smoke,tests,timeslice,mps (default: all)
# Uses the machine's python3 with its CUDA PyTorch (never pulls a CPU wheel). Missing pure-Python packages (e.g.
# xgboost-cpu) may be supplied as wheels in .whl/; they are installed into /tmp/site.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-${OUT:-/tmp}/sharewise-gpu-check}
STAGES=${2:-smoke,tests,timeslice,mps}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
if compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || echo "warning: wheels in .whl/ did not install"
  export PYTHONPATH=$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
export PATH=$PATH:/usr/local/nvidia/bin
SW="$PY -m sharewise"
DS=$OUT/gpu-dataset
rc=0
stage() { [[ ",$STAGES," == *",$1,"* ]]; }
t0=$(date +%s)
say() { echo "=== [$(( $(date +%s) - t0 ))s] $*"; }

if stage smoke; then
  say smoke
  nvidia-smi --query-gpu=name,memory.total,compute_mode,driver_version --format=csv || { echo "no NVIDIA GPU visible"; exit 1; }
  echo "mps control: $(command -v nvidia-cuda-mps-control || echo 'not found')"
  timeout 60 "$PY" - <<'EOF' || rc=1
import sys, time, torch
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)
assert torch.cuda.is_available(), "torch has no CUDA"
print("device", torch.cuda.get_device_name(0))
for mod in ("sharewise.cli", "typer", "rich", "pandas", "pyarrow", "sklearn", "pynvml", "xgboost"):
    try:
        __import__(mod)
    except Exception as exc:
        print(f"import {mod}: FAILED {exc!r}")
from sharewise.profiler.device import device_name
from sharewise.profiler.workloads import load_workload_class
for name in ("resnet18", "bert", "ncf", "lstm_lm"):
    w = load_workload_class(name)(size="full")
    w.build("cuda:0")
    for _ in range(3):
        w.step()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(10):
        w.step()
    torch.cuda.synchronize()
    print(f"{name}: {1000 * (time.perf_counter() - t) / 10:.2f} ms/step on {device_name('cuda:0')}")
EOF
fi

if stage tests; then
  say "gpu tests"
  timeout 120 "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/test_pairs.py tests/test_nvml.py || rc=1
fi

if stage timeslice; then
  say "campaign timeslice"
  timeout "${TS_LIMIT:-240}" $SW pairs -w resnet18,bert,ncf --device cuda:0 --mode timeslice --size full \
    --window 1.0 --repeats 3 --max-repeats 4 --idle-wait 3 --timeout 90 --out "$DS" || rc=1
fi

if stage mps; then
  if command -v nvidia-cuda-mps-control >/dev/null; then
    say "campaign mps"
    timeout "${MPS_LIMIT:-120}" $SW pairs -w resnet18,bert --device cuda:0 --mode mps --size full \
      --window 1.0 --repeats 3 --max-repeats 4 --idle-wait 3 --timeout 90 --out "$DS" || rc=1
  else
    say "mps skipped: nvidia-cuda-mps-control not on PATH"
  fi
fi

say show
$SW show "$DS" 2>&1 || true
[ -d "$DS" ] && tar czf "$OUT/gpu-dataset.tgz" -C "$OUT" gpu-dataset && rm -rf "$DS"
say "done rc=$rc"
exit $rc
