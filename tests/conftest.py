"""Shared test fixtures: a hermetic feature cache, GPU skipping, the path of the public data."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
USER_WORKLOADS = FIXTURES / "user_workloads.py"
SHARED_DATA = REPO.parent / "shared" / "data"

# Features are cached per user; tests must neither read a developer's cache nor leave one behind.
os.environ.setdefault("SHAREWISE_CACHE_DIR", tempfile.mkdtemp(prefix="sharewise-test-cache-"))


def _cuda_available() -> tuple[bool, str]:
    try:
        import torch
    except ImportError:
        return False, "torch is not installed"
    if not torch.cuda.is_available():
        return False, "needs an NVIDIA GPU with CUDA; this machine has none (torch.cuda.is_available() is False)"
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
