#!/usr/bin/env bash
# The README's first command: set up .venv if missing (CPU PyTorch wheel, CPU XGBoost), then run the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check torch==2.13.0 -e '.[cpu]'
.venv/bin/sharewise demo --out demo-out "$@"
