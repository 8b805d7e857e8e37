#!/usr/bin/env bash
# GPU check on one NVIDIA GPU in under 9 minutes: a smoke test of the CUDA path, the @pytest.mark.gpu tests,
# solo profiles (with the probe) of 8 full-size zoo workloads from 8 families, then every pair of them
# (28 distinct pairs + 8 self-pairs = 36, what `sharewise pairs` measures for 8 workloads) in `timeslice` and,
# where NVIDIA MPS is installed, `mps` mode, all into one dataset folder. Logs, the dataset, `sharewise show`
# and a meta file (settings, nvidia-smi, driver, CUDA and torch versions) are packed as ONE archive,
# OUT_DIR/gpu-check.tgz, and nothing else is left in OUT_DIR (the device returns few files, and a campaign
# writes one Parquet file per pair).
#
# Usage: bash scripts/gpu_check.sh [OUT_DIR] [STAGES]
#   OUT_DIR  default: $OUT/sharewise-gpu-check, or /tmp/sharewise-gpu-check without $OUT.
#   STAGES   comma-separated, any of smoke,tests,profile,pairs (all MODES) or single MODES (default: all).
#
# Time: each stage runs under `timeout` with its own budget, counted from when the first stage starts. Time
# a stage leaves unused (it ended early or was skipped) carries over to the next stage, and no stage runs
# past TOTAL_LIMIT - PACK_RESERVE seconds after the script started, so it ends within TOTAL_LIMIT (+ KILL_GRACE,
# the wait between `timeout`'s SIGTERM and its SIGKILL). Profiles and pairs are saved one by one as they
# finish, so a stage cut by its limit keeps what it measured, the later stages still run, and rerunning
# with the same OUT_DIR resumes (the archive found there is unpacked first; RESUME=path/to/gpu-check.tgz
# resumes from an archive elsewhere, e.g. one carried to a fresh GPU machine). Exit status: 1 when a stage
# failed, or when the smoke or test stage was cut by its limit; a measuring stage cut by its limit is
# reported as "cut" in the summary (its partial data is the point of the limit) and still exits 0.
#
# Settings (environment; defaults are for the GPU run):
#   PYTHON=python3   DEVICE=cuda:0   SIZE=full   MODES="timeslice mps" ("cpu cpu-partition" when DEVICE=cpu)
#   WORKLOADS="resnet18 vgg16 mobilenet_v2 bert transformer lstm_lm ncf dcgan"  (spaces or commas)
#   SMOKE_WORKLOADS (default: the first 4 of WORKLOADS)   PROFILE_MODE (default: the first of MODES, not mps)
#   WINDOW=0.3 MIN_STEPS=3 REPEATS=2 MAX_REPEATS=3 CI_TARGET=5 PROFILE_REPEATS=3 ISOLATION=warm
#   IDLE_WAIT=2 RUN_TIMEOUT=60   (--idle-wait and --timeout of one run, seconds)
#   SMOKE_LIMIT=45 TESTS_LIMIT=75 PROFILE_LIMIT=90 PAIRS_LIMIT=150 (each mode; per mode: TIMESLICE_LIMIT,
#   MPS_LIMIT, CPU_LIMIT, CPU_PARTITION_LIMIT)   TOTAL_LIMIT=525 PACK_RESERVE=15 KILL_GRACE=10  (seconds)
# A CPU dry run: DEVICE=cpu SIZE=tiny WORKLOADS="a3c ncf dae_cf" MODES=cpu WINDOW=0.2 bash scripts/gpu_check.sh
# (the smoke stage's nvidia-smi and the GPU test stage are skipped there, with the reason printed).
#
# Uses the machine's python3 with its CUDA PyTorch (never pulls a CPU wheel). Missing pure-Python packages (e.g.
# xgboost-cpu) may be supplied as wheels in .whl/; they are installed into /tmp/site.
set -uo pipefail
T0=$(date +%s)
OUT_DIR=${1:-${OUT:-/tmp}/sharewise-gpu-check}
RESUME=${RESUME:-}
# Paths are relative to where the script was called from.
[[ $OUT_DIR == /* ]] || OUT_DIR=$PWD/$OUT_DIR
[[ -z $RESUME || $RESUME == /* ]] || RESUME=$PWD/$RESUME
cd "$(dirname "$0")/.." || exit 2

fail_usage() { echo "gpu_check.sh: $*" >&2; exit 2; }
# An integer setting from the environment; anything else stops the script before any run.
int_env() {
  local value=${!1:-$2}
  [[ $value =~ ^[0-9]+$ ]] || fail_usage "$1 must be a whole number of seconds or a count, got '$value'"
  printf -v "$1" '%s' "$value"
}

DEVICE=${DEVICE:-cuda:0}
SIZE=${SIZE:-full}
if [[ $DEVICE == cpu ]]; then MODES=${MODES:-cpu cpu-partition}; else MODES=${MODES:-timeslice mps}; fi
WORKLOADS=${WORKLOADS:-resnet18 vgg16 mobilenet_v2 bert transformer lstm_lm ncf dcgan}
read -r -a WL <<<"${WORKLOADS//,/ }"
read -r -a MODE_LIST <<<"${MODES//,/ }"
((${#WL[@]} >= 1)) || fail_usage "WORKLOADS is empty; name at least one workload (sharewise workloads lists them)"
((${#MODE_LIST[@]} >= 1)) || fail_usage "MODES is empty; use e.g. MODES='timeslice mps' or, on the CPU, MODES=cpu"
WL_CSV=$(IFS=,; echo "${WL[*]}")
SMOKE_WORKLOADS=${SMOKE_WORKLOADS:-${WL[*]:0:4}}
PROFILE_MODE=${PROFILE_MODE:-${MODE_LIST[0]}}
# Profiles are kept per mode: the mps campaign profiles its workloads itself, under the daemon, so the
# profile stage measures in the first mode that is not mps.
[[ $PROFILE_MODE == mps ]] && PROFILE_MODE=timeslice
WINDOW=${WINDOW:-0.3}
CI_TARGET=${CI_TARGET:-5}
ISOLATION=${ISOLATION:-warm}
IDLE_WAIT=${IDLE_WAIT:-2}
RUN_TIMEOUT=${RUN_TIMEOUT:-60}
int_env MIN_STEPS 3
int_env REPEATS 2
int_env MAX_REPEATS 3
int_env PROFILE_REPEATS 3
int_env SMOKE_LIMIT 45
int_env TESTS_LIMIT 75
int_env PROFILE_LIMIT 90
int_env PAIRS_LIMIT 150
int_env TOTAL_LIMIT 525
int_env PACK_RESERVE 15
int_env KILL_GRACE 10
STAGES=${2:-${STAGES:-smoke,tests,profile,$(IFS=,; echo "${MODE_LIST[*]}")}}

export PYTHONUNBUFFERED=1 COLUMNS=${COLUMNS:-160}
PY=${PYTHON:-python3}
if compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || echo "warning: wheels in .whl/ did not install"
  export PYTHONPATH=$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
export PATH=$PATH:/usr/local/nvidia/bin
SW=("$PY" -m sharewise)

# Everything goes to WORK; at the end WORK is packed as OUT_DIR/gpu-check.tgz and removed.
ARCHIVE=$OUT_DIR/gpu-check.tgz
WORK=$OUT_DIR/gpu-check
DS=$WORK/dataset
LOGS=$WORK/logs
SUMMARY=$WORK/summary.txt
mkdir -p "$OUT_DIR" || fail_usage "cannot create the output folder $OUT_DIR"
[[ -z $RESUME && -f $ARCHIVE ]] && RESUME=$ARCHIVE
if [[ -n $RESUME && ! -d $WORK ]]; then
  [[ -f $RESUME ]] || fail_usage "RESUME=$RESUME is not a file; give the gpu-check.tgz of an earlier run"
  echo "resuming: unpacking $RESUME (its dataset is resumed, its logs appended to)"
  tar xzf "$RESUME" -C "$OUT_DIR" || echo "warning: $RESUME did not unpack; starting afresh"
fi
mkdir -p "$LOGS"

say() { echo "=== [$(($(date +%s) - T0))s] $*"; }
rc=0
SCHEDULED=0  # seconds after the first stage began by which the stages run so far were due to end
SCHED0=0     # seconds since T0 when the first stage began (set below)
ABORT=""     # set when nothing after the smoke test can work (no GPU visible)
selected() { [[ ",$STAGES," == *",$1,"* ]]; }
record() {  # record STAGE OUTCOME SECONDS DETAIL: one line of summary.txt
  printf '%-20s %-8s %5ss  %s\n' "$1" "$2" "$3" "$4" | tee -a "$SUMMARY"
}
skip_stage() {  # skip_stage NAME BUDGET REASON: its budget carries over to the next stage
  SCHEDULED=$((SCHEDULED + $2))
  say "$1 skipped: $3"
  record "$1" skipped 0 "$3"
}
# run_stage NAME BUDGET CMD...: CMD under its limit, its output in logs/NAME.log and on stdout.
run_stage() {
  local name=$1 budget=$2 now limit began code secs
  shift 2
  SCHEDULED=$((SCHEDULED + budget))
  now=$(($(date +%s) - T0))
  limit=$((SCHED0 + SCHEDULED - now))
  ((limit > TOTAL_LIMIT - PACK_RESERVE - now)) && limit=$((TOTAL_LIMIT - PACK_RESERVE - now))
  if ((limit < 5)); then
    say "$name skipped: no time left (${limit}s of TOTAL_LIMIT=${TOTAL_LIMIT}s)"
    record "$name" skipped 0 "no time left"
    return 0
  fi
  say "$name (limit ${limit}s, budget ${budget}s)"
  echo "--- $(date -u +%FT%TZ) limit ${limit}s: $*" >>"$LOGS/$name.log"
  began=$(date +%s)
  timeout -k "$KILL_GRACE" "$limit" "$@" 2>&1 | tee -a "$LOGS/$name.log"
  code=${PIPESTATUS[0]}
  secs=$(($(date +%s) - began))
  if ((code == 0)); then
    record "$name" ok "$secs" "limit ${limit}s"
  elif ((code == 124 || code == 137)); then
    record "$name" cut "$secs" "stopped by its limit of ${limit}s; what it finished is kept, a rerun resumes"
    [[ $name == smoke || $name == tests ]] && rc=1  # checks, not measurements: a hang there is a fault
  else
    record "$name" failed "$secs" "exit $code, see logs/$name.log"
    rc=1
  fi
  return 0
}

write_meta() {
  {
    echo "# sharewise GPU check: settings"
    echo "date_utc=$(date -u +%FT%TZ)"
    echo "host=$(hostname)"
    echo "git_commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)"
    echo "PYTHON=$PY"
    echo "DEVICE=$DEVICE"
    echo "SIZE=$SIZE"
    echo "WORKLOADS=${WL[*]}"
    echo "MODES=${MODE_LIST[*]}"
    echo "STAGES=$STAGES"
    echo "RESUME=${RESUME:-none}"
    echo "SMOKE_WORKLOADS=$SMOKE_WORKLOADS"
    echo "PROFILE_MODE=$PROFILE_MODE"
    echo "PROFILE_REPEATS=$PROFILE_REPEATS"
    echo "ISOLATION=$ISOLATION"
    echo "WINDOW=$WINDOW"
    echo "MIN_STEPS=$MIN_STEPS"
    echo "REPEATS=$REPEATS"
    echo "MAX_REPEATS=$MAX_REPEATS"
    echo "CI_TARGET=$CI_TARGET"
    echo "IDLE_WAIT=$IDLE_WAIT"
    echo "RUN_TIMEOUT=$RUN_TIMEOUT"
    echo "SMOKE_LIMIT=$SMOKE_LIMIT TESTS_LIMIT=$TESTS_LIMIT PROFILE_LIMIT=$PROFILE_LIMIT PAIRS_LIMIT=$PAIRS_LIMIT"
    for m in "${MODE_LIST[@]}"; do echo "limit_$m=$(mode_budget "$m")"; done
    echo "TOTAL_LIMIT=$TOTAL_LIMIT PACK_RESERVE=$PACK_RESERVE KILL_GRACE=$KILL_GRACE"
    echo
    echo "# environment"
    "$PY" - <<'EOF' 2>&1
import platform, sys
print("python", sys.version.split()[0], platform.platform())
try:
    import torch
    print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(),
          "cuda_available", torch.cuda.is_available())
except Exception as exc:
    print("torch: import failed", repr(exc))
EOF
    echo "mps_control=$(command -v nvidia-cuda-mps-control || echo 'not found')"
    if [[ $DEVICE == cpu ]]; then
      echo "nvidia-smi: skipped (DEVICE=cpu)"
    elif command -v nvidia-smi >/dev/null; then
      nvidia-smi --query-gpu=index,name,memory.total,compute_mode,driver_version --format=csv 2>&1
      echo
      nvidia-smi 2>&1
    else
      echo "nvidia-smi: not found"
    fi
    echo
    echo "# packages"
    "$PY" -m pip list --format=freeze 2>/dev/null || echo "pip list failed"
  } >>"$WORK/meta.txt"
}

mode_budget() {  # the budget of a mode's campaign: ${MODE}_LIMIT (cpu-partition: CPU_PARTITION_LIMIT) or PAIRS_LIMIT
  local var
  var=$(echo "$1" | tr 'a-z-' 'A-Z_')_LIMIT
  int_env "$var" "$PAIRS_LIMIT"
  echo "${!var}"
}
for m in "${MODE_LIST[@]}"; do mode_budget "$m" >/dev/null || exit 2; done

say "gpu check: DEVICE=$DEVICE SIZE=$SIZE WORKLOADS='${WL[*]}' MODES='${MODE_LIST[*]}' -> $ARCHIVE"
write_meta
SCHED0=$(($(date +%s) - T0))

# ---- smoke: nvidia-smi, torch on the device, a few workloads stepping -------------------------------------
if selected smoke; then
  if [[ $DEVICE == cpu ]]; then
    say "smoke: nvidia-smi skipped (DEVICE=cpu, no GPU asked for)"
  elif ! nvidia-smi --query-gpu=name,memory.total,compute_mode,driver_version --format=csv 2>&1 \
    | tee -a "$LOGS/smoke.log"; then
    say "no NVIDIA GPU visible (nvidia-smi failed); the later stages are skipped"
    record smoke failed 0 "nvidia-smi failed: no NVIDIA GPU visible"
    rc=1
    ABORT="no NVIDIA GPU visible"
  fi
  echo "mps control: $(command -v nvidia-cuda-mps-control || echo 'not found')" | tee -a "$LOGS/smoke.log"
  cat >"$WORK/smoke.py" <<'EOF'
"""Smoke test: torch sees the device, the CLI's dependencies import, a few workloads build and step."""
import os
import sys
import time

import torch

device, size, names = os.environ["DEVICE"], os.environ["SIZE"], os.environ["SMOKE_WORKLOADS"].split()
cuda = device.startswith("cuda")
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)
if cuda and not torch.cuda.is_available():
    sys.exit(f"torch {torch.__version__} has no CUDA (torch.cuda.is_available() is False) but DEVICE={device}")
if cuda:
    print("device", torch.cuda.get_device_name(torch.device(device)))
for mod in ("sharewise.cli", "typer", "rich", "pandas", "pyarrow", "sklearn", "pynvml", "xgboost"):
    try:
        __import__(mod)
    except Exception as exc:
        print(f"import {mod}: FAILED {exc!r}")
from sharewise.profiler.device import device_name  # noqa: E402
from sharewise.profiler.workloads import load_workload_class  # noqa: E402


def sync():
    if cuda:
        torch.cuda.synchronize(device)


for name in names:
    w = load_workload_class(name)(size=size)
    w.build(device)
    for _ in range(3):
        w.step()
    sync()
    t = time.perf_counter()
    for _ in range(10):
        w.step()
    sync()
    print(f"{name}: {1000 * (time.perf_counter() - t) / 10:.2f} ms/step on {device_name(device)} (size {size})")
    w.close()
EOF
  if [[ -z $ABORT ]]; then
    export DEVICE SIZE SMOKE_WORKLOADS
    run_stage smoke "$SMOKE_LIMIT" "$PY" "$WORK/smoke.py"
  fi
fi

# ---- the GPU tests ---------------------------------------------------------------------------------------
if selected tests; then
  if [[ -n $ABORT ]]; then
    skip_stage tests 0 "$ABORT"
  elif [[ $DEVICE == cpu ]]; then
    skip_stage tests "$TESTS_LIMIT" "the GPU tests need CUDA and DEVICE=cpu"
  else
    run_stage tests "$TESTS_LIMIT" "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/test_pairs.py tests/test_nvml.py
  fi
fi

# ---- solo profiles with the probe (only the workloads the dataset lacks, so a rerun resumes) -----------------
missing_profiles() {
  [[ -d $DS/profiles ]] || { echo "${WL[*]}"; return; }
  "$PY" - "$DS" "$DEVICE" "$PROFILE_MODE" "$SIZE" "${WL[@]}" <<'EOF' 2>/dev/null || echo "${WL[*]}"
import sys
from sharewise.datasets.store import Dataset
from sharewise.profiler.device import device_name
from sharewise.profiler.workloads import resolve_specs
path, device, mode, size, *specs = sys.argv[1:]
have = Dataset(path).read_profiles()
have = have[(have["device_name"] == device_name(device)) & (have["mode"] == mode) & (have["size"] == size)]
print(" ".join(spec for spec, name in resolve_specs(specs) if name not in set(have["workload"])))
EOF
}
if selected profile; then
  if [[ -n $ABORT ]]; then
    skip_stage profile 0 "$ABORT"
  else
    read -r -a TODO <<<"$(missing_profiles)"
    if ((${#TODO[@]} == 0)); then
      skip_stage profile "$PROFILE_LIMIT" "every workload already has a $PROFILE_MODE profile in the dataset"
    else
      run_stage profile "$PROFILE_LIMIT" "${SW[@]}" profile "${TODO[@]}" --device "$DEVICE" --mode "$PROFILE_MODE" \
        --size "$SIZE" --out "$DS" --window "$WINDOW" --min-steps "$MIN_STEPS" --repeats "$PROFILE_REPEATS" \
        --isolation "$ISOLATION" --idle-wait "$IDLE_WAIT" --timeout "$RUN_TIMEOUT"
    fi
  fi
fi

# ---- pair campaigns, one per mode, into the same dataset (a campaign profiles what its mode lacks) -----------
for m in "${MODE_LIST[@]}"; do
  selected "$m" || selected pairs || continue
  budget=$(mode_budget "$m")
  if [[ -n $ABORT ]]; then
    skip_stage "pairs-$m" 0 "$ABORT"
  elif [[ $m == mps ]] && ! command -v nvidia-cuda-mps-control >/dev/null; then
    skip_stage "pairs-$m" "$budget" "nvidia-cuda-mps-control not on PATH (NVIDIA MPS not installed)"
  else
    run_stage "pairs-$m" "$budget" "${SW[@]}" pairs -w "$WL_CSV" --device "$DEVICE" --mode "$m" --size "$SIZE" \
      --out "$DS" --isolation "$ISOLATION" --window "$WINDOW" --min-steps "$MIN_STEPS" --repeats "$REPEATS" \
      --max-repeats "$MAX_REPEATS" --ci-target "$CI_TARGET" --idle-wait "$IDLE_WAIT" --timeout "$RUN_TIMEOUT"
  fi
done

# ---- what the dataset holds, then one archive --------------------------------------------------------------
say "show"
if [[ -d $DS ]]; then
  timeout 20 "${SW[@]}" show "$DS" >"$WORK/show.txt" 2>&1 || echo "(sharewise show failed)" >>"$WORK/show.txt"
  timeout 20 "${SW[@]}" show "$DS" --json >"$WORK/show.json" 2>>"$LOGS/show.log" || true
  cat "$WORK/show.txt"
  # Per mode: profiles with probe features and pairs by status, against the pairs `sharewise pairs` plans.
  timeout 20 "$PY" - "$DS" "${#WL[@]}" "${MODE_LIST[@]}" <<'EOF' 2>&1 | tee -a "$SUMMARY"
import sys
from sharewise.datasets.store import Dataset
path, n, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
ds = Dataset(path)
profiles, pairs = ds.read_profiles(), ds.read_pairs()
for mode in sorted(set(modes) | set(profiles["mode"]) | set(pairs["mode"])):
    p, q = profiles[profiles["mode"] == mode], pairs[pairs["mode"] == mode]
    probe = int(p["f_probe_slowdown"].notna().sum()) if "f_probe_slowdown" in p else 0
    status = q["status"].value_counts().to_dict()
    print(f"dataset {mode:<14} profiles {len(p)} ({probe} with probe)  pairs {status.get('ok', 0)} ok of "
          f"{n * (n + 1) // 2} planned  status {status}")
EOF
else
  echo "no dataset folder: no stage measured anything" | tee -a "$SUMMARY"
fi

say "pack"
echo "rc=$rc  total $(($(date +%s) - T0))s" >>"$SUMMARY"
echo "stage                outcome    time  detail"
cat "$SUMMARY"
if tar czf "$ARCHIVE.tmp" -C "$OUT_DIR" "$(basename "$WORK")" && mv -f "$ARCHIVE.tmp" "$ARCHIVE"; then
  rm -rf "$WORK"
  say "packed $ARCHIVE ($(du -h "$ARCHIVE" | cut -f1))"
else
  rm -f "$ARCHIVE.tmp"
  say "packing failed; the files stay in $WORK"
  rc=1
fi
say "done rc=$rc"
exit $rc
