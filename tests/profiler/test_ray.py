"""Pair campaigns on a local 2-CPU Ray instance: same rows as the local executor, retries, the CLI, no Ray."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from sharewise.datasets.store import Dataset
from sharewise.errors import MissingDependencyError
from sharewise.profiler.campaign import run_campaign
from sharewise.profiler.config import RunConfig
from sharewise.profiler.device import device_name
from sharewise.profiler.executors import executor_factory

# Small and quick: no slowdown value is asserted (the CPU is shared, the numbers are noise), only rows.
FAST = RunConfig(
    size="tiny",
    window_s=0.3,
    repeats=1,
    max_repeats=1,
    idle_wait_s=0.5,
    timeout_s=60,
    warmup_max_s=5,
    disturbance_retries=0,
    features=False,
)
USER_WORKLOADS = Path(__file__).resolve().parents[1] / "fixtures" / "user_workloads.py"
THREE = [f"{USER_WORKLOADS}:{c}" for c in ("TinyMLP", "TinyConv", "TinyEmbed")]
WORKER_MODULE = "sharewise.profiler.worker"


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray instance with 2 CPUs for the whole module; yields its address for other drivers."""
    ray = pytest.importorskip("ray", reason="Ray is an optional extra (pip install 'sharewise[ray]')")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def _rows(path) -> list[tuple[str, str, str]]:
    """Every pair row on disk, duplicates included: (a, b, status)."""
    df = Dataset(path).read_pairs(latest=False)
    return sorted(zip(df["workload_a"], df["workload_b"], df["status"], strict=True))


class PairWorkerWatch(threading.Thread):
    """Polls for pair worker processes whose parent is a Ray worker (its title starts with ``ray::``).

    Records each pair worker (its Ray worker and spec), the most Ray workers seen hosting pair runs at once,
    and SIGKILLs the Ray worker of each of the first ``kills`` pair runs once its pair workers have run for
    ``settle_s`` (mid-task: they have set their parent-death signal and are importing or stepping).
    """

    def __init__(self, kills: int = 0, settle_s: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.kills = kills
        self.settle_s = settle_s
        # pair worker pid -> (its Ray worker's pid, its spec, when first seen)
        self.workers: dict[int, tuple[int, str, float]] = {}
        self.killed: list[int] = []  # Ray worker pids killed
        self.killed_workers: list[int] = []  # pair worker pids running at each kill
        self.max_hosts_at_once = 0
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)

    def runs(self) -> list[tuple[int, tuple[str, str]]]:
        """Pair runs seen: (Ray worker pid, sorted specs); a run starts its two workers back to back."""
        by_host: dict[int, list[tuple[float, str]]] = {}
        for host, spec, seen in self.workers.values():
            by_host.setdefault(host, []).append((seen, spec))
        out = []
        for host, items in by_host.items():
            specs = [spec for _, spec in sorted(items)]
            out.extend((host, tuple(sorted(specs[i : i + 2]))) for i in range(0, len(specs), 2))
        return out

    def _scan(self) -> dict[int, list[int]]:
        by_host: dict[int, list[int]] = {}
        for proc in psutil.process_iter(["pid", "ppid", "cmdline"]):
            cmd = proc.info["cmdline"] or []
            if WORKER_MODULE not in cmd:
                continue
            try:
                if not (psutil.Process(proc.info["ppid"]).cmdline() or [""])[0].startswith("ray::"):
                    continue
            except psutil.Error:
                continue
            by_host.setdefault(proc.info["ppid"], []).append(proc.pid)
            if proc.pid not in self.workers:
                self.workers[proc.pid] = (proc.info["ppid"], json.loads(cmd[-1])["spec"], time.monotonic())
        return by_host

    def run(self) -> None:
        while not self._halt.is_set():
            by_host = self._scan()
            self.max_hosts_at_once = max(self.max_hosts_at_once, len(by_host))
            for host, pids in by_host.items():
                if len(self.killed) >= self.kills or host in self.killed:
                    continue
                if min(time.monotonic() - self.workers[pid][2] for pid in pids) >= self.settle_s:
                    self.killed_workers.extend(pids)
                    os.kill(host, signal.SIGKILL)
                    self.killed.append(host)
            time.sleep(0.1)


def _gone(pids, wait_s: float = 10.0) -> bool:
    """True once none of ``pids`` runs any more (zombies count as gone: they run nothing)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
def test_ray_campaign_gives_the_same_rows_as_local(ray_cluster, tmp_path):
    two = THREE[:2]  # three pairs: two self-pairs and one other
    local = run_campaign(two, FAST, tmp_path / "local", profile_missing=False)
    assert local.measured == 3 and not local.failures, local.failures

    # The driver is narrowed to one core, so its own device name differs from the node's: rows must carry
    # the name of the node that ran the task (the Ray workers kept both cores).
    cores = os.sched_getaffinity(0)
    watch = PairWorkerWatch()
    watch.start()
    try:
        if len(cores) > 1:
            os.sched_setaffinity(0, {min(cores)})
        driver_name = device_name("cpu")
        summary = run_campaign(
            two, FAST, tmp_path / "ray", profile_missing=False, executor_factory=executor_factory("ray")
        )
        # Resuming finds the pairs although they carry the node's device name, not the driver's.
        rerun = run_campaign(
            two, FAST, tmp_path / "ray", profile_missing=False, executor_factory=executor_factory("ray")
        )
    finally:
        os.sched_setaffinity(0, cores)
        watch.stop()

    assert summary.measured == 3 and not summary.failures, summary.failures
    assert (rerun.measured, rerun.skipped) == (0, 3)
    ray_rows, local_rows = _rows(tmp_path / "ray"), _rows(tmp_path / "local")
    assert ray_rows == local_rows and len(ray_rows) == 3  # 2 self-pairs + 1 other, each once, all ok
    assert {s for _, _, s in ray_rows} == {"ok"}
    ray_df = Dataset(tmp_path / "ray").read_pairs()
    local_names = set(Dataset(tmp_path / "local").read_pairs()["device_name"])
    assert set(ray_df["device_name"]) == local_names
    if len(cores) > 1:
        assert driver_name not in local_names, "the driver's narrowed name should differ from the node's"
    # Each task holds the whole 2-CPU node: never two pair runs at once.
    assert len(watch.runs()) == 3 and watch.max_hosts_at_once == 1


@pytest.mark.slow
def test_a_ray_campaign_profiles_on_the_nodes_that_measure_its_pairs(ray_cluster, tmp_path):
    """Profiles are Ray tasks like pairs: they carry the node's device name, so profiles and pairs join."""
    cores = os.sched_getaffinity(0)
    watch = PairWorkerWatch()
    watch.start()
    try:
        if len(cores) > 1:
            os.sched_setaffinity(0, {min(cores)})
        driver_name = device_name("cpu")
        summary = run_campaign(THREE[:2], FAST, tmp_path, executor_factory=executor_factory("ray"))
        # Resuming finds the profiles under the node's name, as it finds the pairs.
        rerun = run_campaign(THREE[:2], FAST, tmp_path, executor_factory=executor_factory("ray"))
    finally:
        os.sched_setaffinity(0, cores)
        watch.stop()

    assert summary.profiled == 2 and summary.measured == 3 and not summary.failures, summary.failures
    assert (rerun.profiled, rerun.measured, rerun.skipped) == (0, 0, 3)
    profiles, pairs = Dataset(tmp_path).read_profiles(latest=False), Dataset(tmp_path).read_pairs(latest=False)
    assert sorted(profiles["workload"]) == ["tiny_conv", "tiny_mlp"]
    node_names = set(pairs["device_name"])
    assert set(profiles["device_name"]) == node_names and len(node_names) == 1
    if len(cores) > 1:
        assert driver_name not in node_names, "the profile ran on the driver, not on a node"
    # Every worker process ran under a Ray worker. Per workload: its profile (one worker: no probe without
    # features), its self-pair (two) and the mixed pair (one).
    hosted = sorted(spec.rsplit(":", 1)[1] for _, spec, _ in watch.workers.values())
    assert hosted == ["TinyConv"] * 4 + ["TinyMLP"] * 4, hosted


@pytest.mark.slow
def test_a_budget_on_ray_picks_each_pair_after_the_last_is_written(ray_cluster, tmp_path):
    """Ray has room for every task, but the budget's plan gives the next pick only once the last is written:
    two picks for one new workload are two different partners (a pick made before the first row was written
    would take the same partner again)."""
    from test_profiler_campaign import _literal

    from sharewise.app.budget import BudgetPicker
    from sharewise.predictor import train_model

    names = ["tiny_mlp", "tiny_conv", "tiny_embed"]
    profiles, pairs = _literal(names, device_name("cpu"), with_pairs=names[:2])
    ds = Dataset(tmp_path)
    ds.write_profiles(profiles)
    ds.write_pairs(pairs)
    model = train_model(profiles, pairs, n_estimators=10, min_child_weight=1)
    config = FAST.replace(features=True, probe=False)
    summary = run_campaign(THREE, config, ds, executor_factory=executor_factory("ray"), picker=BudgetPicker(2, model))
    assert summary.total == 2 and summary.by_status == {"ok": 2}, summary.failures
    new = ds.read_pairs(latest=False)
    new = new[(new["workload_a"] == "tiny_embed") | (new["workload_b"] == "tiny_embed")]
    assert sorted(new["workload_b"]) == ["tiny_conv", "tiny_mlp"]


@pytest.mark.slow
def test_killed_ray_worker_is_retried_without_lost_or_duplicated_rows(ray_cluster, tmp_path):
    specs = THREE[:2]
    watch = PairWorkerWatch(kills=1)
    watch.start()
    try:
        summary = run_campaign(
            specs,
            FAST,
            tmp_path,
            profile_missing=False,
            executor_factory=executor_factory("ray", max_retries=2),
        )
    finally:
        watch.stop()

    assert len(watch.killed) == 1, "the watch never saw a pair run to kill"
    victim = watch.killed[0]
    assert not psutil.pid_exists(victim) or psutil.Process(victim).status() == psutil.STATUS_ZOMBIE
    assert _gone(watch.killed_workers), "pair workers of the killed Ray worker outlived it"
    # Ray's retry: the killed task's pair ran again, in a fresh Ray worker.
    runs = watch.runs()
    (killed_pair,) = [specs for host, specs in runs if host == victim]
    reruns = [host for host, specs in runs if host != victim and specs == killed_pair]
    assert reruns, f"no retry of {killed_pair} seen; pair runs seen: {runs}"
    rows = _rows(tmp_path)
    assert len(rows) == 3 and len({(a, b) for a, b, _ in rows}) == 3, rows
    assert {s for _, _, s in rows} == {"ok"} and summary.measured == 3 and not summary.failures


@pytest.mark.slow
def test_retries_are_bounded_then_the_pair_is_recorded_failed(ray_cluster, tmp_path):
    watch = PairWorkerWatch(kills=2)
    watch.start()
    try:
        summary = run_campaign(
            THREE[:1],
            FAST,
            tmp_path,
            profile_missing=False,
            executor_factory=executor_factory("ray", max_retries=1),
        )
    finally:
        watch.stop()

    assert len(watch.killed) == 2  # the first attempt and its one retry
    df = Dataset(tmp_path).read_pairs(latest=False)
    assert len(df) == 1 and df.loc[0, "status"] == "failed"
    assert "ray task failed" in df.loc[0, "error"]
    assert summary.failures == [("tiny_mlp", "tiny_mlp", "failed", df.loc[0, "error"])]


@pytest.mark.slow
def test_a_pair_task_holds_a_whole_node(ray_cluster):
    import ray

    from sharewise.profiler.executors.ray import _largest_node_cpus

    # Not ray.available_resources(): that sums over nodes and shrinks while tasks run.
    assert _largest_node_cpus(ray) == 2


@pytest.mark.slow
def test_cli_pairs_on_a_ray_cluster_by_address(ray_cluster, tmp_path):
    """A second driver process joins the running cluster through --address, as on a real cluster."""
    out = tmp_path / "d"
    cmd = [
        sys.executable,
        "-m",
        "sharewise",
        "pairs",
        "-w",
        THREE[0],
        "--size",
        "tiny",
        "--window",
        "0.3",
        "--repeats",
        "1",
        "--max-repeats",
        "1",
        "--idle-wait",
        "0.5",
        "--timeout",
        "60",
        "--executor",
        "ray",
        "--address",
        ray_cluster,
        "--out",
        str(out),
    ]
    env = {**os.environ, "COLUMNS": "200"}  # no wrapped summary lines
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "1 measured" in proc.stdout
    assert _rows(out) == [("tiny_mlp", "tiny_mlp", "ok")]
    assert list(Dataset(out).read_profiles(latest=False)["workload"]) == ["tiny_mlp"]


@pytest.mark.slow
def test_a_bad_address_fails_in_one_line_before_any_run(tmp_path):
    pytest.importorskip("ray", reason="Ray is an optional extra (pip install 'sharewise[ray]')")
    out = tmp_path / "d"
    cmd = [
        sys.executable, "-m", "sharewise", "pairs", "-w", THREE[0], "--size", "tiny",
        "--executor", "ray", "--address", "nonsense:abc", "--out", str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("error: could not start or join the Ray cluster at 'nonsense:abc'")
    assert not Dataset(out).read_profiles(latest=False).shape[0], "it profiled before trying the cluster"


def test_missing_ray_gives_the_install_hint(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails as if Ray were not installed
    with pytest.raises(MissingDependencyError, match=r"pip install 'sharewise\[ray\]'"):
        executor_factory("ray")
    from sharewise.cli import main

    out = tmp_path / "d"
    with pytest.raises(SystemExit) as exc:
        main(["pairs", "-w", THREE[0], "--executor", "ray", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2
    assert len(err.splitlines()) == 1 and "needs Ray" in err and "sharewise[ray]" in err
    assert not out.exists(), "nothing may be written when the executor cannot start"


@pytest.mark.slow
def test_a_stopped_campaign_cancels_its_remaining_ray_tasks(ray_cluster, tmp_path):
    """An error or Ctrl-C in the driver must not leave pair runs going on a cluster that outlives it, nor let a
    queued pair start once the campaign stopped.

    Stopped as its first pair is written: the second pair's task may be running (Ray hands it the node as the
    first ends), the third waits behind it. Once ``run_campaign`` has raised, no task of it is left: the
    running pair's workers go with their Ray worker, and no pair run appears afterwards.
    """
    specs = THREE[:2]
    mixed, last = tuple(sorted(specs)), (specs[1], specs[1])  # the second and the third pair, in plan order

    class Stop(Exception):
        pass

    watch = PairWorkerWatch()
    runs_at_stop: list[tuple[int, tuple[str, str]]] = []
    alive_at_stop: dict[int, list[int]] = {}

    def stop_after_first_pair(event):
        if event.kind == "pair":
            alive_at_stop.update(watch._scan())  # pair workers running at the stop, by their Ray worker
            runs_at_stop.extend(watch.runs())
            raise Stop

    watch.start()
    try:
        with pytest.raises(Stop):
            run_campaign(
                specs, FAST, tmp_path, profile_missing=False, executor_factory=executor_factory("ray"),
                on_event=stop_after_first_pair,
            )
        # Every task has ended by now (close waits for them); pair workers die with their Ray worker.
        assert _eventually(lambda: not watch._scan(), 10.0), "the running pair task was not cancelled"
        time.sleep(2.0)  # long enough for a queued task to show its pair workers, had it started
        late = watch._scan()
    finally:
        watch.stop()
    assert not late, f"a pair task started after the campaign stopped: {late}"
    assert len(_rows(tmp_path)) == 1
    # The third pair was queued at the stop, unless the second had already run and ended before it (the
    # driver writes one row in far less time than a pair run takes, so that is not expected; it is checked).
    second_ended = any(s == mixed and host not in alive_at_stop for host, s in runs_at_stop)
    if not second_ended:
        ran = [s for _, s in watch.runs()]
        assert last not in ran, f"the queued pair {last} started after the campaign stopped; runs seen: {ran}"


@pytest.mark.slow
def test_a_ray_task_started_after_its_campaign_stopped_starts_no_worker(ray_cluster):
    """Ray can start a queued task in the moment between the stop and the task's cancel: the task reads the
    campaign's stop flag first, and comes back skipped without a worker process."""
    import ray

    from sharewise.profiler.executors.ray import StopFlag, _run_on_node
    from sharewise.profiler.pair import PairTask

    stop = StopFlag()
    stop.set()
    watch = PairWorkerWatch()
    watch.start()
    try:
        task = PairTask(THREE[0], THREE[1], "tiny_mlp", "tiny_conv")
        finished = ray.get(ray.remote(num_cpus=2)(_run_on_node).remote(task, FAST, None, stop), timeout=120)
    finally:
        watch.stop()
        stop.clear()
    assert (finished.status, finished.row["status"]) == ("skipped", "skipped")
    assert "the campaign stopped" in finished.error
    assert not watch.workers, "a worker process started for a task of a stopped campaign"
    assert not stop.is_set()


def _eventually(cond, wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True
