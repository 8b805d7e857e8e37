"""Shared test fixtures: a hermetic feature cache, GPU skipping, the public data folder."""

from __future__ import annotations

import itertools
import os
import sys
import tempfile
import time
import types
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
# Tests are grouped by package (tests/<package>/test_*.py, no __init__.py: each module keeps its bare name, so
# names are unique across folders); helpers shared by several (conftest, loadguard, policy_cases, test_predictor's
# builders ...) are imported by bare name from any folder, whatever order pytest collects them in.
for _folder in sorted({p.parent for p in Path(__file__).resolve().parent.glob("*/test_*.py")}):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
FIXTURES = REPO / "tests" / "fixtures"
USER_WORKLOADS = FIXTURES / "user_workloads.py"


# Features are cached per user; tests must neither read a developer's cache nor leave one behind.
os.environ.setdefault("SHAREWISE_CACHE_DIR", tempfile.mkdtemp(prefix="sharewise-test-cache-"))


def _cuda_available() -> tuple[bool, str]:
    try:
        import torch
    except ImportError:
        return False, "torch is not installed"
    if not torch.cuda.is_available():
        return (
            False,
            "needs an NVIDIA GPU with CUDA; this machine has none (torch.cuda.is_available() is False)",
        )
    return True, ""


def pytest_collection_modifyitems(config, items):
    ok, reason = _cuda_available()
    if ok:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def user_spec():
    """Return a function mapping a class name in tests/fixtures/user_workloads.py to its file spec."""
    return lambda cls: f"{USER_WORKLOADS}:{cls}"


@pytest.fixture
def public_data() -> Path:
    """The public data folder: ``$SHAREWISE_DATA``, else this checkout's ``data/`` (also when sharewise was
    installed from a wheel). A test using it never skips: without the data it fails with the error saying how to
    fix it."""
    from sharewise.datasets.public import ENV_VAR, public_data_root

    return public_data_root(None if os.environ.get(ENV_VAR) else REPO / "data")


LITERAL_WORKLOADS = {"w0": (1.0, 0.9), "w1": (2.0, 0.5), "w2": (0.5, 0.8), "w3": (1.5, 0.3)}  # (flops, busy)


def make_literal_dataset(path):
    """Write a 4-workload dataset whose slowdown grows with the partner's busy fraction; return it."""
    from sharewise.datasets import Dataset

    ds = Dataset(path)
    base = dict(
        family="f",
        batch_size=8,
        device_kind="cpu",
        device_name="cpu0",
        mode="cpu",
        host="h",
        torch_version="2",
        created_at="2026-01-01T00:00:00",
        iter_time_ms=10.0,
        throughput=100.0,
    )
    ds.write_profiles(
        pd.DataFrame(
            [
                {**base, "workload": w, "family": f"fam{w}", "f_flops_per_step": f * 1e9, "f_busy_frac": b}
                for w, (f, b) in LITERAL_WORKLOADS.items()
            ]
        )
    )
    rows = []
    for a, b in itertools.combinations_with_replacement(LITERAL_WORKLOADS, 2):
        # Slowdown grows with the partner's busy fraction: a pattern a model can learn from features.
        sa, sb = 1 + LITERAL_WORKLOADS[b][1], 1 + LITERAL_WORKLOADS[a][1]
        rows.append(
            dict(
                workload_a=a,
                workload_b=b,
                device_kind="cpu",
                device_name="cpu0",
                mode="cpu",
                solo_a=10.0,
                solo_b=10.0,
                coloc_a=10 / sa,
                coloc_b=10 / sb,
                slowdown_a=sa,
                slowdown_b=sb,
                trials=3,
                cv_a=0.01,
                cv_b=0.01,
                status="ok",
                error="",
                created_at="2026-01-01T00:00:00",
            )
        )
    ds.write_pairs(pd.DataFrame(rows))
    return ds


def run_cli(argv) -> int:
    """Run ``sharewise.cli.main`` as the console script would; return its exit code (0 when it returns)."""
    from sharewise.cli import main

    try:
        main([str(a) for a in argv])
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def fake_pynvml_base(init_fails: bool = False) -> types.ModuleType:
    """The start of a stand-in ``pynvml`` (NVML needs a GPU, which this machine lacks): ``NVMLError`` and
    ``nvmlInit``/``nvmlShutdown`` that count open sessions in ``inits`` (a test checks it is back at 0); a test
    adds the device calls it needs."""
    mod = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    mod.NVMLError = NVMLError
    mod.inits = 0

    def init():
        if init_fails:
            raise NVMLError("Driver Not Loaded")
        mod.inits += 1

    def shutdown():
        mod.inits -= 1

    mod.nvmlInit = init
    mod.nvmlShutdown = shutdown
    return mod


def wait_steps(path, n: int, proc, timeout: float = 90.0) -> list[tuple[int, float]]:
    """The progress records of a job at ``path`` once it reported ``n`` steps; fails if the job exits first."""
    from sharewise.profiler.progress import read_progress

    began = time.monotonic()
    while time.monotonic() - began < timeout:
        records = read_progress(path)
        if len(records) >= n:
            return records
        assert proc.poll() is None, f"the job exited with {proc.returncode} after {len(records)} steps"
        time.sleep(0.02)
    raise AssertionError(f"fewer than {n} steps within {timeout} s")
