"""Shared test fixtures: a hermetic feature cache, GPU skipping, the path of the public data."""

from __future__ import annotations

import itertools
import os
import tempfile
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
USER_WORKLOADS = FIXTURES / "user_workloads.py"
# The public data sits beside the repository in the workplace; $SHAREWISE_SHARED_DATA points elsewhere (a
# worktree one level deeper, a CI cache).
SHARED_DATA = Path(os.environ.get("SHAREWISE_SHARED_DATA", REPO.parent / "shared" / "data"))

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
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"public data folder {SHARED_DATA} is absent (it sits beside the repo in the workplace)")
    return SHARED_DATA


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
