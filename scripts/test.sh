#!/usr/bin/env bash
# The README's test command: set up .venv if missing (CPU PyTorch wheel, CPU XGBoost, Ray), then run the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check torch==2.13.0 -e '.[cpu,dev,ray]'
.venv/bin/python -m pytest -q "$@"
