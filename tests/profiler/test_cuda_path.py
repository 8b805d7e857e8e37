"""The CUDA path's defects found by reading it (issue 40), each checked where a CPU can check it.

What needs a GPU is faked here, and only that: ``torch.cuda``'s initialized state and its current stream (a
recording object), since this machine has no CUDA. The GPU runs of the same paths are in ``test_gpu.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pandas as pd
import pytest

from sharewise.profiler.config import RunConfig


# ---- 1. the CLI imports and writes JSON without orjson (the GPU machine's image has none) -------------------
def test_the_cli_works_without_orjson(tmp_path):
    # A blocked module: ``import orjson`` raises ImportError in the child, as where it is not installed.
    code = (
        "import sys; sys.modules['orjson'] = None\n"
        "from sharewise.cli import main\n"
        "main(['workloads', '--json'])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = [w["name"] for w in json.loads(proc.stdout)]
    assert "resnet18" in names and "\n  " in proc.stdout  # indented, as orjson writes it


def test_print_json_falls_back_to_the_standard_library(monkeypatch, capsys):
    import numpy as np

    from sharewise.cli.common import print_json

    monkeypatch.setitem(sys.modules, "orjson", None)
    print_json({"n": np.int64(3), "x": [np.nan, 1.5], 2: "k"})
    assert json.loads(capsys.readouterr().out) == {"n": 3, "x": [None, 1.5], "2": "k"}


# ---- 2. --device cuda without an index ---------------------------------------------------------------------
def test_cuda_without_an_index_is_device_zero():
    from sharewise.profiler.worker import torch_device

    assert RunConfig(device="cuda", mode="timeslice").device == "cuda:0"
    assert RunConfig(device="cuda:1", mode="timeslice").device == "cuda:1"
    assert RunConfig(device="cpu", mode="cpu").device == "cpu"
    # torch.cuda.set_device(torch.device("cuda")) raises "Expected a torch.device with a specified index".
    assert torch_device("cuda").index == 0 and torch_device("cuda:2").index == 2
    assert torch_device("cpu").type == "cpu"


# ---- 3. CUPTI detached after the feature trace --------------------------------------------------------------
def test_workers_and_command_jobs_tear_cupti_down(tmp_path):
    from sharewise.profiler.commands import job_environment, parse_command
    from sharewise.profiler.modes import CoreAssignment, worker_env

    assert worker_env(CoreAssignment((0,), 1), {})["TEARDOWN_CUPTI"] == "1"
    env = job_environment(parse_command("job=cmd:python train.py"), progress_path=tmp_path / "p", base={})
    assert env["TEARDOWN_CUPTI"] == "1"
    # The user's explicit choice in the spec still wins, as for every variable the spec sets.
    env = job_environment(parse_command("job=cmd:TEARDOWN_CUPTI=0 python train.py"), progress_path=tmp_path / "p")
    assert env["TEARDOWN_CUPTI"] == "0"


# ---- 4. a command's steps are stamped after its kernels, and a pause waits for the queue --------------------
class _RecordingStream:
    """Stands for a CUDA stream: records when it was synchronized."""

    def __init__(self) -> None:
        self.synced: list[float] = []

    def synchronize(self) -> None:
        time.sleep(0.01)  # the queued kernels finishing
        self.synced.append(time.time())


def test_the_step_hook_synchronizes_before_it_stamps_a_step(tmp_path, monkeypatch):
    import torch

    from sharewise.profiler import progress
    from sharewise.profiler.stephook import ENV_SYNC, StepHook

    stream = _RecordingStream()
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: stream)
    path = tmp_path / "progress"
    hook = StepHook({progress.ENV_PATH: str(path)})
    assert hook.step("call") == 1 and hook.step("call") == 2
    stamps = [float(line.split()[1]) for line in path.read_text().splitlines()]
    assert len(stream.synced) == 2
    assert all(stamp >= synced for stamp, synced in zip(stamps, stream.synced, strict=True))

    off = StepHook({progress.ENV_PATH: str(tmp_path / "off"), ENV_SYNC: "0"})
    off.step("call")
    assert len(stream.synced) == 2, "SHAREWISE_SYNC_STEPS=0 turns the synchronization off"


def test_the_hook_does_not_synchronize_a_job_without_cuda(tmp_path, monkeypatch):
    import torch

    from sharewise.profiler import progress
    from sharewise.profiler.stephook import StepHook

    stream = _RecordingStream()
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: stream)
    StepHook({progress.ENV_PATH: str(tmp_path / "p")}).step("call")
    assert stream.synced == []  # torch.cuda.is_initialized() is False on this machine


def test_a_pause_waits_for_one_step_of_queued_kernels_on_a_gpu():
    from sharewise.profiler.job_process import DRAIN_MAX_S, drain_seconds

    assert drain_seconds("cuda:0", 0.05) == 0.05
    assert drain_seconds("cuda:0", 60.0) == DRAIN_MAX_S
    assert drain_seconds("cuda:0", float("nan")) == 0.0  # no step time known yet: nothing queued either
    assert drain_seconds("cpu", 0.05) == 0.0  # SIGSTOP stops all of a CPU job's work


# ---- 7. the mps campaign reuses the features traced in timeslice --------------------------------------------
def test_mps_profiles_reuse_the_timeslice_features():
    from sharewise.profiler.modes import SHARING_MODES
    from sharewise.profiler.solo import _feature_key

    info = {"batch_size": 32, "device_name": "NVIDIA H200", "torch_version": "2.11.0"}
    key = {m: _feature_key("resnet18", RunConfig(device="cuda:0", mode=m), info) for m in ("timeslice", "mps")}
    assert key["mps"] == key["timeslice"]
    assert SHARING_MODES.get("mps").features_mode == "timeslice"
    # On CPUs the two modes give a job different cores, so their features stay apart.
    cpu = {m: _feature_key("ncf", RunConfig(device="cpu", mode=m), {**info, "device_name": "cpu"})
           for m in ("cpu", "cpu-partition")}
    assert cpu["cpu"] != cpu["cpu-partition"]


# ---- run: a GPU dataset holds timeslice and mps pairs; a run knows its own mode's ------------------------------
def _pairs(rows):
    cols = ["workload_a", "workload_b", "device_name", "mode", "slowdown_a", "slowdown_b", "status"]
    return pd.DataFrame(rows, columns=cols)


def test_a_run_knows_the_pairs_of_its_own_sharing_mode():
    from sharewise.app.run_inputs import one_mode
    from sharewise.errors import ConfigError

    pairs = _pairs([("a", "b", "H200", "timeslice", 1.5, 1.6, "ok"), ("a", "b", "H200", "mps", 1.1, 1.2, "ok"),
                    ("a", "b", "cpu0", "cpu", 1.3, 1.3, "ok")])
    profiles = pd.DataFrame({"workload": ["a", "a", "a"], "device_name": ["H200", "H200", "cpu0"],
                             "mode": ["timeslice", "mps", "cpu"]})
    prof, got, notes = one_mode(profiles, pairs, "H200", "mps")
    assert sorted(zip(got["device_name"], got["mode"], strict=True)) == [("H200", "mps"), ("cpu0", "cpu")]
    assert sorted(prof["mode"]) == ["cpu", "mps"] and notes
    from sharewise.engine.table import SlowdownTable

    table = SlowdownTable.from_pairs(got, device_name="H200")  # one mode left: no "several modes" error
    assert table.p50[0, 1] == pytest.approx(1.1)
    with pytest.raises(ConfigError, match="--mode"):
        one_mode(profiles, pairs[pairs["mode"] != "cpu"], "H200", "other")
    one = pairs[pairs["mode"] == "timeslice"]
    _, same, _ = one_mode(profiles, one, "H200", "timeslice")
    assert same.equals(one)


def test_gpu_tests_are_marked_and_skip_here():
    # The GPU stage of scripts/gpu_check.sh runs `-m gpu`: every test of test_gpu.py must carry the mark.
    import ast
    from pathlib import Path

    tree = ast.parse((Path(__file__).parent / "test_gpu.py").read_text())
    tests = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
    assert tests
    for fn in tests:
        marks = {ast.unparse(d) for d in fn.decorator_list}
        assert "pytest.mark.gpu" in marks, f"{fn.name} lacks @pytest.mark.gpu"
    assert os.path.exists(Path(__file__).parents[2] / "scripts" / "gpu_check.sh")


# ---- the GPU window: a campaign starts its CUDA workers together, not pair by pair ---------------------------
@pytest.mark.slow
def test_prestarted_workers_are_the_ones_the_pairs_take():
    from sharewise.profiler.modes import placements
    from sharewise.profiler.pool import WorkerPool

    config = RunConfig(size="tiny", warmup_steps=2, warmup_max_s=2.0, timeout_s=120)
    first, second = placements(config, 2)
    with WorkerPool(config) as pool:
        assert pool.prestart(["ncf", "ncf"], [first, second]) == 2
        assert len(pool.idle) == 2 and not pool.busy
        assert pool.prestart(["ncf"], [first]) == 0, "an idle worker of that spec and placement is not started again"
        a, b = pool.acquire(["ncf", "ncf"], [first, second])
        assert (pool.started, pool.reused) == (2, 2) and a is not b
        pool.release([a, b])
    with pytest.raises(ValueError, match="reuse=True"):
        WorkerPool(config, reuse=False).prestart(["ncf"], [first])


def test_a_cpu_campaign_starts_nothing_ahead():
    # On a CPU the starts would compete for the cores being measured: prepare starts nothing there.
    from sharewise.profiler.executors.local import LocalExecutor
    from sharewise.profiler.pair import PairTask

    with LocalExecutor(RunConfig(size="tiny"), "cpu0") as executor:
        assert executor.prepare([PairTask("ncf", "ncf", "ncf", "ncf")]) == 0
        assert executor.pool.started == 0


# ---- part 2: the shipped GPU campaign --------------------------------------------------------------------------
def test_reference_h200_is_a_dataset_by_name(capsys):
    from conftest import run_cli

    from sharewise.datasets.store import SHIPPED_DATASETS, Dataset, resolve_dataset_path

    assert "reference-h200" in SHIPPED_DATASETS
    ds = Dataset(resolve_dataset_path("reference-h200"))
    profiles, pairs = ds.read_profiles(), ds.read_pairs()
    assert set(profiles["device_name"]) == set(pairs["device_name"]) == {"NVIDIA H200"}
    assert sorted(profiles.groupby("mode").size().items()) == [("mps", 8), ("timeslice", 8)]
    assert profiles.loc[profiles["mode"] == "timeslice", "f_probe_slowdown"].notna().all()
    assert len(pairs) == 18 and set(pairs["status"]) == {"ok"} and set(pairs["mode"]) == {"timeslice"}
    meta = json.loads((ds.path / "meta.json").read_text())
    assert meta["machine"]["driver"] and meta["machine"]["torch"].startswith("2.11")

    assert run_cli(["show", "reference-h200"]) == 0
    assert "NVIDIA H200, mode timeslice" in capsys.readouterr().out
    assert run_cli(["evaluate", "reference-h200", "--group-by", "workload", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["n_groups"] == 8 and 0 < summary["model"]["mape"] < 100


def test_both_kinds_of_worker_are_one_protocol():
    # Issue 38: a built-in workload's process and a training command's share one driver-side protocol.
    import inspect
    import re
    import typing

    from sharewise.profiler.blackbox import CommandWorker
    from sharewise.profiler.session import Worker, WorkerProcess

    members = [n for n in vars(WorkerProcess) if not n.startswith("_")]
    fields = list(typing.get_type_hints(WorkerProcess, include_extras=False, localns={"CoreAssignment": object}))
    assert {"send", "recv", "close", "kill", "pid", "alive", "mem_bytes", "request_exit"} <= set(members)
    for cls in (Worker, CommandWorker):
        missing = [m for m in members if not hasattr(cls, m)]
        init = inspect.getsource(cls.__init__)
        missing += [f for f in fields if not re.search(rf"self\.{f}\b\s*(:[^=\n]*)?=", init) and not hasattr(cls, f)]
        assert not missing, f"{cls.__name__} lacks {missing} of WorkerProcess"


def test_the_numba_internals_compiled_uses_exist_in_the_pinned_numba():
    # engine/compiled.py stamps numba's private cache locators; pyproject.toml caps numba at the versions checked.
    import numba
    from numba.core import caching

    from sharewise.engine import compiled

    impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
    assert impl is not None and isinstance(impl._locator_classes, list), numba.__version__
    for name in ("UserProvidedCacheLocator", "InTreeCacheLocator"):
        assert getattr(caching, name, None) or getattr(caching, "_" + name, None), (name, numba.__version__)
    assert any(c.__name__.startswith("Stamped") for c in impl._locator_classes), "the stamped locators are first"
    assert all(path.is_file() for path in compiled.SOURCES), [p for p in compiled.SOURCES if not p.is_file()]
