#!/usr/bin/env bash
# GPU check on one NVIDIA GPU, its stages ordered by value, each stage keeping what it finished:
#   smoke     torch sees the GPU, `sharewise.cli` imports (else the run stops here), two workloads step;
#   profile   solo profiles with the probe of 8 full-size zoo workloads from 8 families; run by the first mode's
#             pair campaign when that is selected (its workers, on a pair member's host threads under the solo
#             rule, then serve its pairs), else by `sharewise profile`;
#   MODES     every pair of them (28 distinct + 8 self-pairs = 36, what `sharewise pairs` measures for 8
#             workloads) per sharing mode: `timeslice`, then `mps` where NVIDIA MPS is installed (its profiles
#             reuse the timeslice features from the feature cache; no probe there: MPS_PROBE=1 adds it); each
#             campaign ends by itself within its budget (--time-budget) and extends, in the time left, the pairs
#             whose interval missed CI_TARGET, its own first, then those recorded before (--extend, --retry-failed:
#             longer windows, more repeats; what still misses is flagged `precision=missed` in its row);
#   physical  `sharewise run` of a PHYS_JOBS-job trace drawn from PHYS_WORKLOADS under exclusive-sjf, sjf-bsbf and
#             sharewise, knowing the pairs measured above (out-of-fold predictions, one workload held out at a
#             time; with few pairs the predictions say how they widened), with --compare-sim (this sitting's truth);
#   mps-split the slowdown contract's knob (issue 48): SPLIT_WORKLOADS' pairs (default the first two of WORKLOADS)
#             at SPLITS (default 30:70,50:50,70:30; 70:30 on the CPU) under MPS thread percentages (the CPU: a
#             cgroup CPU quota), into the main dataset, each split its own row;
#   command   a training script (tests/fixtures/cnn_train.py) as `NAME=cmd:...`, profiled next to the same
#             model as a class, then paired with itself and with CMD_PARTNER;
#   tests     the @pytest.mark.gpu tests (a CUDA command job paused and resumed, an MPS pair, NVML sampling; `run
#             --device cuda` only where the physical stage is not selected, which runs it for real).
# With SEED=reference-h200 on an H200 the profiles are there, so the window goes to the missing pairs of both
# modes first. The time plan of the stages (from the last H200 window's costs per step) is printed first;
# PLAN=1 prints it and exits (no device used: PLAN_DEVICE names the device to plan for, e.g. "NVIDIA H200");
# a run ends by printing the plan its own measured costs give (logs/plan.log).
# Logs, the dataset, the physical run folder, `sharewise show`, the feature cache and a meta file (settings,
# nvidia-smi, driver, CUDA and torch versions, pip list) are packed as ONE archive, OUT_DIR/gpu-check.tgz, and
# nothing else is left in OUT_DIR (the device returns few files, and a campaign writes one Parquet file per pair).
#
# Usage: bash scripts/gpu_check.sh [OUT_DIR] [STAGES]
#   OUT_DIR  default: $OUT/sharewise-gpu-check, or /tmp/sharewise-gpu-check without $OUT.
#   STAGES   comma-separated, any of smoke,profile,pairs (all MODES),physical,mps-split,command,tests or single
#            MODES (default: all).
#
# Time: each stage runs under `timeout` with its own budget, counted from when the first stage starts. Time
# a stage leaves unused (it ended early or was skipped) carries over to the next stage, and no stage runs
# past TOTAL_LIMIT - PACK_RESERVE seconds after the script started, so it ends within TOTAL_LIMIT (+ KILL_GRACE,
# the wait between `timeout`'s SIGTERM and its SIGKILL). Profiles, pairs and finished physical runs are saved one
# by one as they finish, so a stage cut by its limit keeps what it measured, the later stages still run, and
# rerunning with the same OUT_DIR resumes (the archive found there is unpacked first; RESUME=path/to/gpu-check.tgz
# resumes from an archive elsewhere, e.g. one carried to a fresh GPU machine): measured profiles and pairs are not
# measured again, a finished physical run or command stage is skipped. Exit status: 1 when a stage failed, or
# when the smoke or test stage was cut by its limit; a measuring stage cut by its limit is reported as "cut" in
# the summary (its partial data is the point of the limit) and still exits 0. A failed smoke stage stops the run.
#
# Settings (environment; defaults are for the GPU run):
#   PYTHON=python3   DEVICE=cuda:0   SIZE=full   MODES="timeslice mps" ("cpu" when DEVICE=cpu)
#   WORKLOADS="resnet18 vgg16 mobilenet_v2 bert transformer lstm_lm ncf dcgan"  (spaces or commas)
#   SMOKE_WORKLOADS (default: the first 2 of WORKLOADS)   PROFILE_MODE (default: the first of MODES, not mps)
#   WINDOW=0.3 MIN_STEPS=3 REPEATS=3 MAX_REPEATS=6 CI_TARGET=5 EXTEND=1 PROFILE_REPEATS=3 ISOLATION=warm MPS_PROBE=0
#   IDLE_WAIT=2 RUN_TIMEOUT=60   (--idle-wait and --timeout of one run, seconds)
#   PHYS_JOBS=4 PHYS_MIN_S=3 PHYS_MAX_S=8 PHYS_LOAD=1.5 PHYS_SEED=0 PHYS_CALIBRATE=1 (every job, and each
#   workload's calibration, is a new CUDA process: about 8.5 s of start-up each on the H200)
#   PHYS_WORKLOADS="resnet18 bert ncf"  PHYS_POLICIES="exclusive-sjf sjf-bsbf sharewise"
#   CMD_BATCH=64 CMD_PARTNER=resnet18 CMD_PROBE=1 (0: the command stage skips the probe windows)
#   SMOKE_LIMIT=30 PROFILE_LIMIT=80 PAIRS_LIMIT=120 (each mode; per mode: TIMESLICE_LIMIT, MPS_LIMIT=200,
#   CPU_LIMIT, CPU_PARTITION_LIMIT)  PHYSICAL_LIMIT=130 MPS_SPLIT_LIMIT=75 COMMAND_LIMIT=60 TESTS_LIMIT=45
#   TOTAL_LIMIT=480 PACK_RESERVE=15 KILL_GRACE=10  (seconds; 480 s leaves a 15-minute device window room for a
#   machine start and one rerun that resumes what was cut)
#   KEEP_DIR: also copy the archive there (a folder outside $OUT, which the device empties before each command,
#   so a rerun on the same warm machine resumes with RESUME=$KEEP_DIR/gpu-check.tgz and nothing carried)
#   SHAREWISE_CACHE_DIR (default: a folder inside the archive, so a rerun on a fresh machine reuses the features)
#   SEED: a shipped dataset (or a dataset folder) to start from when there is nothing to resume (e.g.
#   SEED=reference-h200 on an H200: only the profiles and pairs it lacks are measured, and with the others'
#   rows the physical stage's policies know more)
#   PLAN=1: print the time plan and exit (PLAN=0: print none); PLAN_DEVICE: the device whose missing rows
#   it counts
# A CPU dry run: DEVICE=cpu SIZE=tiny WORKLOADS="a3c ncf dae_cf" MODES=cpu WINDOW=0.2 PHYS_WORKLOADS="a3c ncf"
# CMD_PARTNER=ncf bash scripts/gpu_check.sh (the smoke stage's nvidia-smi and the GPU test stage are skipped there,
# with the reason printed; tests/project/test_gpu_check.py runs it with every import refused that the GPU image lacks).
#
# Uses the machine's python3 with its CUDA PyTorch (never pulls a CPU wheel). The GPU image has no XGBoost (which
# `run`'s predictions need) and no orjson (the CLI does without): carry wheels in .whl/ (scripts/gpu_image_packages.txt
# lists what the image has and what is carried); they are installed into /tmp/site.
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
if [[ $DEVICE == cpu ]]; then MODES=${MODES:-cpu}; else MODES=${MODES:-timeslice mps}; fi
WORKLOADS=${WORKLOADS:-resnet18 vgg16 mobilenet_v2 bert transformer lstm_lm ncf dcgan}
read -r -a WL <<<"${WORKLOADS//,/ }"
read -r -a MODE_LIST <<<"${MODES//,/ }"
((${#WL[@]} >= 1)) || fail_usage "WORKLOADS is empty; name at least one workload (sharewise workloads lists them)"
((${#MODE_LIST[@]} >= 1)) || fail_usage "MODES is empty; use e.g. MODES='timeslice mps' or, on the CPU, MODES=cpu"
WL_CSV=$(IFS=,; echo "${WL[*]}")
SMOKE_WORKLOADS=${SMOKE_WORKLOADS:-${WL[*]:0:2}}
PROFILE_MODE=${PROFILE_MODE:-${MODE_LIST[0]}}
# Profiles are kept per mode: the mps campaign profiles its workloads itself, under the daemon, so the
# profile stage measures in the first mode that is not mps.
[[ $PROFILE_MODE == mps ]] && PROFILE_MODE=timeslice
WINDOW=${WINDOW:-0.3}
CI_TARGET=${CI_TARGET:-5}
ISOLATION=${ISOLATION:-warm}
IDLE_WAIT=${IDLE_WAIT:-2}
RUN_TIMEOUT=${RUN_TIMEOUT:-60}
PHYS_WORKLOADS=${PHYS_WORKLOADS:-resnet18 bert ncf}
PHYS_POLICIES=${PHYS_POLICIES:-exclusive-sjf sjf-bsbf sharewise}
PHYS_MIN_S=${PHYS_MIN_S:-3}
PHYS_MAX_S=${PHYS_MAX_S:-8}
PHYS_LOAD=${PHYS_LOAD:-1.5}
PHYS_CALIBRATE=${PHYS_CALIBRATE:-1}
CMD_PARTNER=${CMD_PARTNER:-resnet18}
CMD_PROBE=${CMD_PROBE:-1}
read -r -a PHYS_WL <<<"${PHYS_WORKLOADS//,/ }"
read -r -a PHYS_POL <<<"${PHYS_POLICIES//,/ }"
int_env MIN_STEPS 3
int_env REPEATS 3
int_env MAX_REPEATS 6
int_env EXTEND 1
int_env PROFILE_REPEATS 3
int_env MPS_PROBE 0
int_env PHYS_JOBS 4
int_env PHYS_SEED 0
int_env CMD_BATCH 64
int_env SMOKE_LIMIT 30
int_env TESTS_LIMIT 45
int_env PROFILE_LIMIT 80
int_env PAIRS_LIMIT 120
int_env PHYSICAL_LIMIT 130
int_env MPS_SPLIT_LIMIT 75
int_env COMMAND_LIMIT 60
int_env TOTAL_LIMIT 480
int_env PACK_RESERVE 15
int_env KILL_GRACE 10
STAGES=${2:-${STAGES:-smoke,profile,$(IFS=,; echo "${MODE_LIST[*]}"),physical,mps-split,command,tests}}

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

mode_budget() {  # the budget of a mode's campaign: ${MODE}_LIMIT (cpu-partition: CPU_PARTITION_LIMIT) or PAIRS_LIMIT
  local var
  var=$(echo "$1" | tr 'a-z-' 'A-Z_')_LIMIT
  int_env "$var" "$PAIRS_LIMIT"
  echo "${!var}"
}
[[ -z ${MPS_LIMIT:-} ]] && MPS_LIMIT=200
for m in "${MODE_LIST[@]}"; do mode_budget "$m" >/dev/null || exit 2; done

# The time plan (scripts/gpu_plan.py) reads the settings from the environment.
plan_env() {
  export WORKLOADS="${WL[*]}" MODES="${MODE_LIST[*]}" STAGES PROFILE_MODE DEVICE SIZE WINDOW REPEATS MAX_REPEATS \
    EXTEND SMOKE_WORKLOADS PHYS_JOBS PHYS_MIN_S PHYS_MAX_S PHYS_WORKLOADS PHYS_POLICIES PHYS_CALIBRATE SMOKE_LIMIT \
    TESTS_LIMIT PROFILE_LIMIT PHYSICAL_LIMIT MPS_SPLIT_LIMIT COMMAND_LIMIT TOTAL_LIMIT
  local m
  for m in "${MODE_LIST[@]}"; do export "LIMIT_$(echo "$m" | tr 'a-z-' 'A-Z_')=$(mode_budget "$m")"; done
}
seed_path() {  # the folder of SEED: a dataset folder, or the name of a dataset sharewise ships
  if [[ -d $SEED ]]; then echo "$SEED"; return; fi
  "$PY" -c "import sys; from sharewise.datasets.store import reference_path; print(reference_path(sys.argv[1]))" \
    "$SEED" 2>/dev/null || fail_usage "SEED=$SEED is neither a dataset folder nor a dataset sharewise ships"
}
if [[ ${PLAN:-0} == 1 ]]; then  # the plan alone: nothing is measured, OUT_DIR is not touched
  plan_ds=/nonexistent
  plan_tmp=$(mktemp -d)
  if [[ -n $RESUME ]]; then
    tar xzf "$RESUME" -C "$plan_tmp" && plan_ds=$plan_tmp/gpu-check/dataset
  elif [[ -f $OUT_DIR/gpu-check.tgz ]]; then
    tar xzf "$OUT_DIR/gpu-check.tgz" -C "$plan_tmp" && plan_ds=$plan_tmp/gpu-check/dataset
  elif [[ -n ${SEED:-} ]]; then
    plan_ds=$(seed_path) || exit 2
  fi
  plan_env
  "$PY" scripts/gpu_plan.py "$plan_ds"
  code=$?
  rm -rf "$plan_tmp"
  exit $code
fi

# Everything goes to WORK; at the end WORK is packed as OUT_DIR/gpu-check.tgz and removed.
ARCHIVE=$OUT_DIR/gpu-check.tgz
WORK=$OUT_DIR/gpu-check
DS=$WORK/dataset
LOGS=$WORK/logs
PHYS=$WORK/physical
SUMMARY=$WORK/summary.txt
# Features are cached per machine; inside WORK they travel with the archive to a rerun on a fresh machine.
export SHAREWISE_CACHE_DIR=${SHAREWISE_CACHE_DIR:-$WORK/cache}
mkdir -p "$OUT_DIR" || fail_usage "cannot create the output folder $OUT_DIR"
[[ -z $RESUME && -f $ARCHIVE ]] && RESUME=$ARCHIVE
if [[ -n $RESUME && ! -d $WORK ]]; then
  [[ -f $RESUME ]] || fail_usage "RESUME=$RESUME is not a file; give the gpu-check.tgz of an earlier run"
  echo "resuming: unpacking $RESUME (its dataset is resumed, its logs appended to)"
  tar xzf "$RESUME" -C "$OUT_DIR" || echo "warning: $RESUME did not unpack; starting afresh"
fi
mkdir -p "$LOGS"
# SEED: start from a shipped dataset's measurements (reference-h200 on an H200 with the same software), so a
# window measures only what that dataset lacks; rows of another device or mode are kept and never resumed.
if [[ -n ${SEED:-} && ! -d $DS ]]; then
  seed_dir=$(seed_path) || exit 2
  mkdir -p "$DS"
  for table in profiles pairs; do [[ -d $seed_dir/$table ]] && cp -r "$seed_dir/$table" "$DS/"; done
  echo "seeded $DS from $SEED ($seed_dir)"
fi

say() { echo "=== [$(($(date +%s) - T0))s] $*"; }
rc=0
SCHEDULED=0  # seconds after the first stage began by which the stages run so far were due to end
SCHED0=0     # seconds since T0 when the first stage began (set below)
ABORT=""     # set when nothing after the smoke test can work (no GPU visible, the CLI cannot import)
LAST_OUTCOME=""  # ok, cut, failed or skipped: how the last run_stage ended
selected() { [[ ",$STAGES," == *",$1,"* ]]; }
record() {  # record STAGE OUTCOME SECONDS DETAIL: one line of summary.txt
  printf '%-20s %-8s %5ss  %s\n' "$1" "$2" "$3" "$4" | tee -a "$SUMMARY"
}
skip_stage() {  # skip_stage NAME BUDGET REASON: its budget carries over to the next stage
  SCHEDULED=$((SCHEDULED + $2))
  say "$1 skipped: $3"
  record "$1" skipped 0 "$3"
}
STAGE_MARGIN=8  # seconds a campaign's --time-budget leaves of its stage: its start, its workers' exit
stage_limit() {  # stage_limit BUDGET: the seconds a stage of BUDGET started now gets (its budget, carried time)
  local now limit
  now=$(($(date +%s) - T0))
  limit=$((SCHED0 + SCHEDULED + $1 - now))
  ((limit > TOTAL_LIMIT - PACK_RESERVE - now)) && limit=$((TOTAL_LIMIT - PACK_RESERVE - now))
  echo "$limit"
}
# run_stage NAME BUDGET CMD...: CMD under its limit, its output in logs/NAME.log and on stdout.
run_stage() {
  local name=$1 budget=$2 limit began code secs
  shift 2
  limit=$(stage_limit "$budget")
  SCHEDULED=$((SCHEDULED + budget))
  if ((limit < 5)); then
    LAST_OUTCOME=skipped
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
  LAST_OUTCOME=failed
  if ((code == 0)); then
    LAST_OUTCOME=ok
    record "$name" ok "$secs" "limit ${limit}s"
  elif ((code == 124 || code == 137)); then
    LAST_OUTCOME=cut
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
    echo "EXTEND=$EXTEND"
    echo "SEED=${SEED:-none}"
    echo "IDLE_WAIT=$IDLE_WAIT"
    echo "RUN_TIMEOUT=$RUN_TIMEOUT"
    echo "MPS_PROBE=$MPS_PROBE"
    echo "PHYS_JOBS=$PHYS_JOBS PHYS_MIN_S=$PHYS_MIN_S PHYS_MAX_S=$PHYS_MAX_S PHYS_LOAD=$PHYS_LOAD PHYS_SEED=$PHYS_SEED"
    echo "PHYS_CALIBRATE=$PHYS_CALIBRATE"
    echo "PHYS_WORKLOADS=${PHYS_WL[*]}"
    echo "PHYS_POLICIES=${PHYS_POL[*]}"
    echo "CMD_BATCH=$CMD_BATCH CMD_PARTNER=$CMD_PARTNER CMD_PROBE=$CMD_PROBE"
    echo "SMOKE_LIMIT=$SMOKE_LIMIT TESTS_LIMIT=$TESTS_LIMIT PROFILE_LIMIT=$PROFILE_LIMIT PAIRS_LIMIT=$PAIRS_LIMIT"
    echo "PHYSICAL_LIMIT=$PHYSICAL_LIMIT MPS_SPLIT_LIMIT=$MPS_SPLIT_LIMIT COMMAND_LIMIT=$COMMAND_LIMIT"
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

say "gpu check: DEVICE=$DEVICE SIZE=$SIZE WORKLOADS='${WL[*]}' MODES='${MODE_LIST[*]}' -> $ARCHIVE"
write_meta
# The plan of this run's stages with the last H200 window's costs per step (logs/plan.log): before any stage,
# so a window's first minute says whether its stages fit.
plan_env
[[ ${PLAN:-} == 0 ]] || timeout 30 "$PY" scripts/gpu_plan.py "$DS" 2>&1 | tee -a "$LOGS/plan.log"
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
"""Smoke test: torch sees the device, the CLI imports, a few workloads build and step."""
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
# Every later stage is a CLI command: if the CLI cannot import, nothing after this can work.
try:
    import sharewise.cli  # noqa: F401
except Exception as exc:
    sys.exit(f"import sharewise.cli: FAILED {exc!r}; every later stage runs the CLI, so the run stops here")
for mod in ("xgboost", "pynvml", "orjson"):  # optional here: say what is missing and what it costs
    try:
        __import__(mod)
    except Exception as exc:
        why = {"xgboost": "the physical stage's predictions and `evaluate` need it: carry a wheel in .whl/",
               "pynvml": "no NVML features", "orjson": "JSON output through the standard library"}[mod]
        print(f"import {mod}: missing ({exc!r}); {why}")
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
    [[ $LAST_OUTCOME == ok ]] || ABORT="the smoke stage ended '$LAST_OUTCOME' (logs/smoke.log)"
    [[ -n $ABORT ]] && say "stopping: $ABORT; the later stages are skipped"
  fi
fi

# ---- solo profiles with the probe (only the workloads the dataset lacks, so a rerun resumes) -----------------
PROFILE_BUDGET=0  # seconds of the profile stage's budget the first mode's campaign takes over (it profiles)
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
    elif [[ " ${MODE_LIST[*]} " == *" $PROFILE_MODE "* ]] && { selected "$PROFILE_MODE" || selected pairs; }; then
      # Under the solo rule a profile's worker is one its pairs can use: the campaign profiles in the workers
      # its pairs then take, where a profile stage's would end with it. Its budget goes to that campaign.
      PROFILE_BUDGET=$PROFILE_LIMIT
      skip_stage profile "$PROFILE_LIMIT" \
        "${#TODO[@]} profile(s) left to pairs-$PROFILE_MODE, whose pairs reuse their workers"
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
    # mps profiles take the timeslice features from the cache; their probe windows are optional (MPS_PROBE).
    probe=()
    [[ $m == mps && $MPS_PROBE == 0 ]] && probe=(--no-probe)
    # The campaign ends by itself within its own budget (and the profile stage's, where it profiles), so time
    # it leaves carries over to the next stage rather than the extensions of its pairs (the next mode's
    # missing pairs are worth more), and a stage limit never cuts a pair half-way.
    own=$budget
    [[ $m == "$PROFILE_MODE" ]] && own=$((budget + PROFILE_BUDGET))
    hard=$(stage_limit "$budget")
    ((own > hard)) && own=$hard
    ((own = own > STAGE_MARGIN ? own - STAGE_MARGIN : 1))
    run_stage "pairs-$m" "$budget" "${SW[@]}" pairs -w "$WL_CSV" --device "$DEVICE" --mode "$m" --size "$SIZE" \
      --out "$DS" --isolation "$ISOLATION" --window "$WINDOW" --min-steps "$MIN_STEPS" --repeats "$REPEATS" \
      --max-repeats "$MAX_REPEATS" --ci-target "$CI_TARGET" --extend "$EXTEND" --retry-failed \
      --idle-wait "$IDLE_WAIT" --timeout "$RUN_TIMEOUT" --time-budget "$own" \
      "${probe[@]}"
  fi
done

# ---- a physical run on the measured pairs: `sharewise run --compare-sim` of a short trace ---------------------
# The trace is drawn once (benchmarks/bench_physical.py's shape, durations PHYS_MIN_S..PHYS_MAX_S s) and kept, so
# a rerun resumes the same run folder: finished policies are not run again.
if selected physical; then
  if [[ -n $ABORT ]]; then
    skip_stage physical 0 "$ABORT"
  elif [[ -f $PHYS/done ]]; then
    skip_stage physical "$PHYSICAL_LIMIT" "finished in an earlier run ($PHYS/run)"
  elif [[ ! -d $DS/pairs ]]; then
    skip_stage physical "$PHYSICAL_LIMIT" "no measured pairs in $DS for the policies to know"
  else
    mkdir -p "$PHYS"
    if [[ ! -f $PHYS/trace.csv ]]; then
      "$PY" benchmarks/bench_physical.py --trace-only "$PHYS/trace.csv" --jobs "$PHYS_JOBS" --seed "$PHYS_SEED" \
        --load "$PHYS_LOAD" --min-s "$PHYS_MIN_S" --max-s "$PHYS_MAX_S" --workloads "${PHYS_WL[@]}" \
        2>&1 | tee -a "$LOGS/physical.log"
    fi
    run_device=cuda
    slots=()
    if [[ $DEVICE == cpu ]]; then run_device=cpu; slots=(--slots 1); fi
    policies=()
    for p in "${PHYS_POL[@]}"; do policies+=(--policy "$p"); done
    run_stage physical "$PHYSICAL_LIMIT" "${SW[@]}" run "$PHYS/trace.csv" --data "$DS" --device "$run_device" \
      "${slots[@]}" --size "$SIZE" --out "$PHYS/run" --calibrate "$PHYS_CALIBRATE" --compare-sim "${policies[@]}" \
      --group-by workload
    [[ $LAST_OUTCOME == ok ]] && touch "$PHYS/done"
  fi
fi

# ---- the split stage of the slowdown contract (issue 48): pairs under the sharing knob at a few splits ---------
# On a GPU: MPS, each client's active thread percentage (a new pair of workers per split: MPS reads it at start; the
# solos run on the warm workers without it). On the CPU (the dry run): the cgroup CPU quota on the warm workers.
# SPLIT_WORKLOADS (default: the first two of WORKLOADS, their pairs and self-pairs) at SPLITS (default 30:70,
# 50:50, 70:30 on a GPU, 70:30 on the CPU), into the main dataset: each split is its own row (split_a).
if selected mps-split; then
  split_mode=mps
  [[ $DEVICE == cpu ]] && split_mode=cpu
  if [[ -n $ABORT ]]; then
    skip_stage mps-split 0 "$ABORT"
  elif [[ $split_mode == mps ]] && ! command -v nvidia-cuda-mps-control >/dev/null; then
    skip_stage mps-split "$MPS_SPLIT_LIMIT" "nvidia-cuda-mps-control not on PATH (NVIDIA MPS not installed)"
  elif [[ $split_mode == cpu ]] && ! "$PY" -c "from sharewise.profiler.knob import knob_for; knob_for('cpu').check()" \
      >>"$LOGS/mps-split.log" 2>&1; then
    skip_stage mps-split "$MPS_SPLIT_LIMIT" "no writable cgroup CPU controller here (see logs/mps-split.log)"
  else
    read -r -a SPLIT_WL <<<"${SPLIT_WORKLOADS:-${WL[0]} ${WL[1]:-${WL[0]}}}"
    split_csv=$(IFS=,; echo "${SPLIT_WL[*]}")
    default_splits=30:70,50:50,70:30
    [[ $split_mode == cpu ]] && default_splits=70:30
    split_args=()
    for s in ${SPLITS:-$default_splits}; do split_args+=(--split "$s"); done
    hard=$(stage_limit "$MPS_SPLIT_LIMIT")
    ((own = hard > STAGE_MARGIN ? hard - STAGE_MARGIN : 1))
    probe=()
    [[ $split_mode == mps && $MPS_PROBE == 0 ]] && probe=(--no-probe)
    run_stage mps-split "$MPS_SPLIT_LIMIT" "${SW[@]}" pairs -w "$split_csv" --device "$DEVICE" --mode "$split_mode" \
      --size "$SIZE" --out "$DS" --isolation "$ISOLATION" --window "$WINDOW" --min-steps "$MIN_STEPS" \
      --repeats "$REPEATS" --max-repeats "$MAX_REPEATS" --ci-target "$CI_TARGET" --idle-wait "$IDLE_WAIT" \
      --timeout "$RUN_TIMEOUT" --time-budget "$own" "${split_args[@]}" "${probe[@]}"
  fi
fi

# ---- a training command next to the same model as a class, and paired with a built-in workload ---------------
# Its own dataset (CMD_DS), so the main one stays the 8 workloads' complete matrix.
CMD_DS=$WORK/command-dataset
if selected command; then
  if [[ -n $ABORT ]]; then
    skip_stage command 0 "$ABORT"
  elif [[ -f $WORK/command.done ]]; then
    skip_stage command "$COMMAND_LIMIT" "finished in an earlier run ($CMD_DS)"
  else
    script=$PWD/tests/fixtures/cnn_train.py
    cmd_dev=cpu
    [[ $DEVICE == cpu ]] || cmd_dev=cuda
    cmd_spec="cnn_cmd=cmd:--batch-size $CMD_BATCH $PY $script --data fixed --batch-size $CMD_BATCH --device $cmd_dev"
    class_spec="$script:Net[input=3x32x32;loss=cross_entropy;optimizer=sgd;lr=0.01]"
    profile_mode=${PROFILE_MODE}
    command_stage() {
      local probe=()
      [[ $CMD_PROBE == 0 ]] && probe=(--no-probe)
      "${SW[@]}" profile "$class_spec" --batch-size "$CMD_BATCH" --device "$DEVICE" --mode "$profile_mode" \
        --size "$SIZE" --out "$CMD_DS" --window "$WINDOW" --min-steps "$MIN_STEPS" --repeats "$PROFILE_REPEATS" \
        --idle-wait "$IDLE_WAIT" --timeout "$RUN_TIMEOUT" "${probe[@]}" || return
      "${SW[@]}" pairs -w "$cmd_spec" -w "$CMD_PARTNER" --device "$DEVICE" --mode "$profile_mode" --size "$SIZE" \
        --out "$CMD_DS" --isolation "$ISOLATION" --window "$WINDOW" --min-steps "$MIN_STEPS" --repeats "$REPEATS" \
        --max-repeats "$MAX_REPEATS" --ci-target "$CI_TARGET" --extend "$EXTEND" --idle-wait "$IDLE_WAIT" \
        --timeout "$RUN_TIMEOUT" "${probe[@]}"
    }
    export -f command_stage
    export PY DEVICE SIZE CMD_DS CMD_BATCH CMD_PARTNER CMD_PROBE WINDOW MIN_STEPS PROFILE_REPEATS IDLE_WAIT RUN_TIMEOUT \
      ISOLATION REPEATS MAX_REPEATS CI_TARGET EXTEND cmd_spec class_spec profile_mode
    run_stage command "$COMMAND_LIMIT" bash -c 'SW=("$PY" -m sharewise); command_stage'
    [[ $LAST_OUTCOME == ok ]] && touch "$WORK/command.done"
  fi
fi

# ---- the GPU tests (last: the measuring stages above check the same paths and keep what they measure) -----
if selected tests; then
  if [[ -n $ABORT ]]; then
    skip_stage tests 0 "$ABORT"
  elif [[ $DEVICE == cpu ]]; then
    skip_stage tests "$TESTS_LIMIT" "the GPU tests need CUDA and DEVICE=cpu"
  else
    # `run --device cuda` starts a CUDA process per job (over a minute): the physical stage runs it for real.
    deselect=()
    selected physical && deselect=(--deselect tests/profiler/test_gpu.py::test_a_short_run_on_the_gpu_finishes_every_job)
    # -v names each test as it ends and faulthandler dumps the stacks of one that hangs: a cut stage says where.
    run_stage tests "$TESTS_LIMIT" "$PY" -m pytest -v -p no:cacheprovider -o faulthandler_timeout=40 --durations=0 \
      -m gpu "${deselect[@]}" tests/profiler/test_gpu.py tests/profiler/test_nvml.py tests/profiler/test_command_runs.py tests/profiler/test_pairs.py
  fi
fi

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
# The pairs under the knob (the mps-split stage: a finite split_a) are counted apart from the matrix.
knob = pairs["split_a"].notna() if "split_a" in pairs else pairs["mode"].isna()
for mode in sorted(set(modes) | set(profiles["mode"]) | set(pairs["mode"])):
    p, q = profiles[profiles["mode"] == mode], pairs[(pairs["mode"] == mode) & ~knob]
    probe = int(p["f_probe_slowdown"].notna().sum()) if "f_probe_slowdown" in p else 0
    status = q["status"].value_counts().to_dict()
    under = pairs[(pairs["mode"] == mode) & knob]
    split = f"  under the knob {int((under['status'] == 'ok').sum())} ok of {len(under)}" if len(under) else ""
    print(f"dataset {mode:<14} profiles {len(p)} ({probe} with probe)  pairs {status.get('ok', 0)} ok of "
          f"{n * (n + 1) // 2} planned  status {status}{split}")
EOF
else
  echo "no dataset folder: no stage measured anything" | tee -a "$SUMMARY"
fi
if [[ -d $CMD_DS ]]; then
  timeout 20 "${SW[@]}" show "$CMD_DS" >"$WORK/show-command.txt" 2>&1 || echo "(sharewise show failed)" >>"$WORK/show-command.txt"
fi

# The plan of a fresh run of these stages from this run's own measured costs (its rows' pair and profile seconds,
# its stages' seconds): on a CPU dry run, the plan its machine gives.
if [[ ${PLAN:-} != 0 ]]; then
  echo "--- with this run's measured costs, for a fresh start:" >>"$LOGS/plan.log"
  timeout 30 "$PY" scripts/gpu_plan.py /nonexistent --measured "$WORK" 2>&1 | tee -a "$LOGS/plan.log"
fi

say "pack"
echo "rc=$rc  total $(($(date +%s) - T0))s" >>"$SUMMARY"
echo "stage                outcome    time  detail"
cat "$SUMMARY"
if tar czf "$ARCHIVE.tmp" -C "$OUT_DIR" "$(basename "$WORK")" && mv -f "$ARCHIVE.tmp" "$ARCHIVE"; then
  rm -rf "$WORK"
  say "packed $ARCHIVE ($(du -h "$ARCHIVE" | cut -f1))"
  if [[ -n ${KEEP_DIR:-} ]]; then
    mkdir -p "$KEEP_DIR" && cp -f "$ARCHIVE" "$KEEP_DIR/" && say "kept a copy in $KEEP_DIR"
  fi
else
  rm -f "$ARCHIVE.tmp"
  say "packing failed; the files stay in $WORK"
  rc=1
fi
say "done rc=$rc"
exit $rc
