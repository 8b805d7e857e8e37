"""The real thing: a Prometheus server scrapes two observed training commands sharing CPU cores on 127.0.0.1, and
``sharewise collect`` reads its HTTP API into a pair row.

Everything is bounded in time and on loopback: the server listens on 127.0.0.1 only, keeps its data in the test's
folder and is stopped in a ``finally``; every wait has a timeout. Without the ``prometheus`` binary (Debian's
package; ``.ci/run`` installs it) the test skips, saying so. ``benchmarks/bench_observed_pairs.py`` runs the same
sitting next to ``sharewise pairs`` of the same two jobs.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
#: Two ordinary training scripts (they import nothing from sharewise), on the CPU, forever until stopped.
JOBS = {
    "cnn": [sys.executable, str(FIXTURES / "cnn_train.py"), "--device", "cpu", "--data", "fixed"],
    "lm": [sys.executable, str(FIXTURES / "lm_accum.py"), "--device", "cpu"],
}
SCRAPE_S = 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(check, timeout_s: float, what: str, proc: subprocess.Popen | None = None):
    """Poll ``check()`` until it returns something truthy (returned), or fail after ``timeout_s`` saying ``what``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what}: the process exited with {proc.returncode} first")
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.read().decode()
    except OSError:
        return None


class PrometheusServer:
    """A Prometheus server on 127.0.0.1 scraping ``targets`` (``host:port``) every second, its data in ``folder``;
    a context manager that starts it, waits until it is ready, and stops it on leaving."""

    def __init__(self, folder: Path, targets: list[str], binary: str = "prometheus") -> None:
        self.folder, self.targets, self.binary = folder, targets, binary
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> PrometheusServer:
        self.folder.mkdir(parents=True, exist_ok=True)
        config = self.folder / "prometheus.yml"
        targets = ", ".join(f"'{t}'" for t in self.targets)
        config.write_text(
            f"global:\n  scrape_interval: {SCRAPE_S}s\n  scrape_timeout: {SCRAPE_S}s\n"
            f"scrape_configs:\n  - job_name: sharewise\n    static_configs:\n      - targets: [{targets}]\n"
        )
        log = open(self.folder / "prometheus.log", "wb")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            [self.binary, f"--config.file={config}", f"--storage.tsdb.path={self.folder / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"], stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        try:
            wait_for(lambda: _get(f"{self.url}/-/ready") is not None, 60, "Prometheus ready", self.proc)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_observed(name: str, port: int, cores: list[int], log: Path) -> subprocess.Popen:
    """Start job ``name`` under ``sharewise observe`` as the guide does, on ``cores`` (as ``taskset -c`` would).
    ``observe`` gives a CPU job the environment of a pair's workers (one thread per core, OpenMP threads waiting
    passively, pinned: ``modes.worker_env``); ``--cpu-env`` says it is one where a GPU is visible too."""
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "sharewise", "observe", "--cpu-env", "--port", str(port),
                                 "--name", name, "--", *JOBS[name]], stdout=out, stderr=out, stdin=subprocess.DEVNULL,
                                preexec_fn=lambda: os.sched_setaffinity(0, cores))


def steps_served(port: int) -> float:
    """The step count a job serves on ``port`` (0 before its first step)."""
    text = _get(f"http://127.0.0.1:{port}/metrics") or ""
    lines = [x for x in text.splitlines() if x.startswith("sharewise_observed_steps_total")]
    return float(lines[0].split()[-1]) if lines else 0.0


def stop(proc: subprocess.Popen, timeout_s: float = 30.0) -> None:
    """SIGTERM to the wrapper (it passes it on), then SIGKILL to both after ``timeout_s``."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def observed_sitting(folder: Path, names: tuple[str, str], ports: tuple[int, int], cores: list[int],
                     phase_s: float, rounds: int = 1, start_timeout_s: float = 120.0) -> tuple[float, float]:
    """Run ``names[0]`` alone, then in each round start the other job (both together), then stop the one that ran
    longer (the newcomer alone): with one round the first job alone, both, the second alone; more rounds alternate,
    so a drift of the machine's speed biases alone and together stretches alike. Each phase lasts ``phase_s`` from
    the moment the started job's metrics show it stepping; a restarted job is a new process under the same name.
    Returns the unix times the sitting began and ended."""
    began = time.time()
    running: dict[str, subprocess.Popen] = {}

    def start(k: int) -> None:
        name, port = names[k], ports[k]
        running[name] = start_observed(name, port, cores, folder / f"{name}.log")
        wait_for(lambda: steps_served(port) >= 5, start_timeout_s, f"{name} stepping", running[name])
        time.sleep(phase_s)

    try:
        start(0)
        for r in range(rounds):
            start(1 - r % 2)  # the job not running joins: together
            stop(running.pop(names[r % 2]))  # the one that ran longer leaves: the newcomer alone
            time.sleep(phase_s)
        for proc in running.values():
            stop(proc)
        time.sleep(3 * SCRAPE_S)  # the last scrapes, and the staleness markers that end the series
    finally:
        for proc in running.values():
            stop(proc, timeout_s=10)
    return began, time.time()


@pytest.mark.slow
def test_prometheus_scrapes_two_observed_jobs_and_collect_makes_their_pair_row(tmp_path):
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("needs the prometheus binary (Debian: apt-get install prometheus; .ci/run installs it)")
    from sharewise.datasets.store import Dataset
    from sharewise.observe.collect import CollectOptions, collect
    from sharewise.profiler.modes import available_cores

    ports = (free_port(), free_port())
    cores = list(available_cores())
    with PrometheusServer(tmp_path / "prometheus", [f"127.0.0.1:{p}" for p in ports], binary) as server:
        began, ended = observed_sitting(tmp_path, ("cnn", "lm"), ports, cores, phase_s=15)
        # The precision of the row is the benchmark's matter (on a busy 2-core machine a half-width reached 68%):
        # here any finite interval passes, and the row must be there.
        result = collect(CollectOptions(prometheus=server.url, start=began, end=ended, out=tmp_path / "observed",
                                        ci_target=0.99))
    names = {j.name for j in result.observed.jobs}
    assert names == {"cnn", "lm"}, f"series read: {names}"
    assert [i.jobs for i in result.intervals] == [("cnn", "lm")], result.intervals
    assert len(result.rows) == 1, (result.skipped, [i.outcome for i in result.intervals])
    row = result.rows.iloc[0]
    assert row["source"] == "observed" and row["device_name"].endswith(f"({len(cores)} cores)")
    for side in ("a", "b"):
        assert math.isfinite(row[f"slowdown_{side}"]) and row[f"slowdown_{side}"] > 0
        assert math.isfinite(row[f"ci_{side}"]) and row[f"ci_{side}"] > 0
    assert row["isolation"] == "observed:alone/alone" and row["trials"] >= 3
    assert len(Dataset(tmp_path / "observed").read_pairs()) == 1
    assert os.path.getsize(tmp_path / "cnn.log") > 0  # the job ran as it does: its own output went on
