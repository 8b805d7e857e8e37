"""The CUDA path end to end on a real GPU: a command job paused and resumed, an MPS pair, and ``sharewise run
--device cuda``. Every test needs an NVIDIA GPU (``@pytest.mark.gpu``) and skips elsewhere, saying why;
``scripts/gpu_check.sh`` runs them first on a lent GPU. They assert what holds on any GPU: statuses, step
counts, a stopped job that does not step, finished jobs; no speed bound.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FIXTURES, USER_WORKLOADS, wait_steps

PY = shlex.quote(sys.executable)


def _steps(path: Path) -> list[tuple[int, float]]:
    from sharewise.profiler.progress import read_progress

    return read_progress(path)


@pytest.mark.slow
@pytest.mark.gpu
def test_a_cuda_command_job_stops_on_sigstop_and_goes_on_after_sigcont(tmp_path):
    from sharewise.profiler.commands import launch, parse_command
    from sharewise.profiler.job_process import drain_seconds

    spec = parse_command(f"cnn=cmd:{PY} {shlex.quote(str(FIXTURES / 'cnn_train.py'))} --device cuda --batch-size 256")
    progress = tmp_path / "progress"
    with open(tmp_path / "out.log", "wb") as log:
        proc = launch(spec, progress_path=progress, cuda_devices="0", stdout=log, die_with_parent=True)
    try:
        records = wait_steps(progress, 30, proc, timeout=120)
        step_s = (records[-1][1] - records[-11][1]) / 10  # synchronized: a step's time includes its kernels
        assert step_s > 0
        os.killpg(proc.pid, signal.SIGSTOP)
        time.sleep(drain_seconds("cuda:0", step_s) + 0.1)
        held = len(_steps(progress))
        time.sleep(max(0.5, 10 * step_s))
        assert len(_steps(progress)) == held, "a stopped CUDA job reported steps"
        os.killpg(proc.pid, signal.SIGCONT)
        wait_steps(progress, held + 10, proc, timeout=120)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.gpu
def test_an_mps_pair_runs_under_a_daemon_started_for_it(tmp_path):
    if shutil.which("nvidia-cuda-mps-control") is None:
        pytest.skip("NVIDIA MPS is not installed (nvidia-cuda-mps-control is not on PATH)")
    from sharewise.datasets.store import Dataset

    spec = f"{USER_WORKLOADS}:MatmulLoop"
    proc = subprocess.run(
        [sys.executable, "-m", "sharewise", "pairs", "-w", spec, "--device", "cuda", "--mode", "mps", "--out",
         str(tmp_path / "d"), "--repeats", "2", "--max-repeats", "2", "--window", "0.3", "--no-probe",
         "--idle-wait", "0"],
        capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    pairs = Dataset(tmp_path / "d").read_pairs()
    assert len(pairs) == 1 and pairs["status"].tolist() == ["ok"], pairs[["status", "error"]]
    assert pairs["mode"].tolist() == ["mps"] and pairs["device_kind"].tolist() == ["cuda"]


@pytest.mark.slow
@pytest.mark.gpu
def test_a_short_run_on_the_gpu_finishes_every_job(tmp_path):
    trace = tmp_path / "jobs.csv"
    trace.write_text("job_id,arrival_s,workload,gpus,steps\nj0,0,ncf,1,300\nj1,0,ncf,1,200\nj2,1,ncf,1,200\n")
    proc = subprocess.run(
        [sys.executable, "-m", "sharewise", "run", str(trace), "--device", "cuda", "--size", "tiny", "--out",
         str(tmp_path / "run"), "--calibrate", "1", "-p", "exclusive-sjf", "-p", "sjf-bsbf", "--oracle", "--json"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["device"]["kind"] == "cuda" and summary["device"]["slots"] >= 1
    for policy in ("exclusive-sjf", "sjf-bsbf"):
        run = summary["runs"][policy]
        assert run["complete"], run
        assert {job["job_id"]: job["status"] for job in run["jobs"]} == {"j0": "done", "j1": "done", "j2": "done"}
        assert all(job["steps_done"] == job["steps"] for job in run["jobs"])
