"""``sharewise observe``: the exporter inside a job's interpreter, the wrapper, the environment-only way, and what
deployment plans carry so their jobs are observed."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import venv
from pathlib import Path

import pytest

from sharewise.profiler.exporter import INFO_SERIES, LAST_STEP, STEPS_SERIES, cpu_list, parse_cpu_list

REPO = Path(__file__).resolve().parents[2]
SHAREWISE = [sys.executable, "-m", "sharewise"]
# A script that is no training job at all: it steps by the standard library's audit call, 10 ms apart.
STEPPER = "import sys, time\nfor _ in range({n}):\n    sys.audit('sharewise.step'); time.sleep(0.01)\nprint('done')"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int, timeout_s: float = 20.0, until=lambda samples: True) -> dict:
    """``{series: [(labels, value)]}`` of the observed series at ``127.0.0.1:port``, once ``until`` holds (bounded)."""
    from prometheus_client.parser import text_string_to_metric_families

    deadline = time.monotonic() + timeout_s
    last_error = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                text = r.read().decode()
        except OSError as exc:
            last_error = exc
            time.sleep(0.1)
            continue
        samples: dict = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                samples.setdefault(s.name, []).append((s.labels, s.value))
        if until(samples):
            return samples
        time.sleep(0.1)
    raise AssertionError(f"no metrics on port {port} within {timeout_s} s (last error: {last_error})")


def test_core_lists_read_back():
    for cores in ([0], [0, 1, 2, 3], [0, 2, 3, 4, 9], list(range(64)) + [100]):
        assert sorted(parse_cpu_list(cpu_list(cores))) == sorted(cores)
    assert cpu_list([3, 1, 2, 8]) == "1-3,8"
    with pytest.raises(ValueError):
        parse_cpu_list("3-1")


# ---- the exporter in this process -----------------------------------------------------------------------------
def test_a_hook_without_a_progress_file_exports_the_steps_of_the_process():
    pytest.importorskip("prometheus_client")
    from sharewise.profiler.stephook import StepHook

    port = free_port()
    hook = StepHook({"SHAREWISE_OBSERVE_PORT": str(port), "SHAREWISE_OBSERVE_NAME": "job-a"})
    try:
        began = time.time()
        assert [hook.step() for _ in range(3)] == [1, 2, 3]
        samples = scrape(port)
    finally:
        hook.exporter.close()
    ((labels, value),) = samples[STEPS_SERIES]
    assert value == 3.0
    assert labels["name"] == "job-a" and labels["device_kind"] == "cpu" and labels["pid"] == str(os.getpid())
    assert labels["device"] == cpu_list(os.sched_getaffinity(0)) and labels["host"] == socket.gethostname()
    assert labels["device_name"].endswith(f"({len(os.sched_getaffinity(0))} cores)")
    ((info, one),) = samples[INFO_SERIES]
    assert info == labels and one == 1.0
    ((_, last),) = samples[LAST_STEP]
    assert began <= last <= time.time()


def test_a_taken_port_is_one_line_on_stderr_and_the_steps_go_on(capfd):
    pytest.importorskip("prometheus_client")
    from sharewise.profiler.stephook import StepHook

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        hook = StepHook({"SHAREWISE_OBSERVE_PORT": str(taken.getsockname()[1])})
        assert [hook.step() for _ in range(4)] == [1, 2, 3, 4]
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "cannot serve metrics on 127.0.0.1:" in err and "runs on unobserved" in err


def test_a_bad_port_or_none_observes_nothing(capfd):
    from sharewise.profiler.stephook import StepHook, install

    assert install({}) is None  # neither a progress file nor a port: no hook at all
    hook = StepHook({"SHAREWISE_OBSERVE_PORT": "http"})
    assert hook.exporter is None and hook.step() is None
    assert "is not a port" in capfd.readouterr().err


# ---- the wrapper and the environment ----------------------------------------------------------------------------
def test_observe_runs_a_script_unchanged_and_serves_its_steps_on_its_cores(tmp_path):
    pytest.importorskip("prometheus_client")
    port = free_port()
    core = sorted(os.sched_getaffinity(0))[-1]
    script = STEPPER.format(n=100_000)
    env = {**os.environ, "SHAREWISE_PIN_CORES": "1", "SHAREWISE_CORES": str(core)}  # the existing pinning
    proc = subprocess.Popen([*SHAREWISE, "observe", "--port", str(port), "--name", "stepper", "--", sys.executable,
                             "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        samples = scrape(port, until=lambda s: s.get(STEPS_SERIES) and s[STEPS_SERIES][0][1] >= 20)
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    ((labels, steps),) = samples[STEPS_SERIES]
    assert steps >= 20 and labels["name"] == "stepper" and labels["device"] == str(core)
    assert labels["pid"] != str(proc.pid)  # the job's own process serves them, not the wrapper
    assert proc.returncode == -signal.SIGTERM  # the wrapper ends as its command did: by the signal passed on
    assert "sharewise" not in err


def test_observe_returns_the_exit_status_and_passes_signals_on(tmp_path):
    port = str(free_port())
    exit3 = [sys.executable, "-c", "import sys; sys.exit(3)"]
    done = subprocess.run([*SHAREWISE, "observe", "--port", port, "--", *exit3], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 3
    handler = ("import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(7))\n"
               "print('ready', flush=True)\ntime.sleep(60)")
    proc = subprocess.Popen([*SHAREWISE, "observe", "--port", port, "--", sys.executable, "-c", handler],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)  # to the wrapper: the command's handler runs and sets the status
        assert proc.wait(timeout=30) == 7
    finally:
        proc.kill()
        proc.wait()
    missing = subprocess.run([*SHAREWISE, "observe", "--", "no-such-program-xyz"], capture_output=True, text=True,
                             timeout=120)
    assert missing.returncode == 2 and missing.stderr.startswith("error: cannot start") and missing.stderr.count(
        "\n") == 1


def test_the_environment_alone_observes_a_job(tmp_path):
    """What a pod spec or a Slurm script sets: the hook first on PYTHONPATH and the port; no wrapper, no
    SHAREWISE_LIB (sharewise comes from the job's own Python)."""
    pytest.importorskip("prometheus_client")
    from sharewise.profiler.commands import HOOK_DIR

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHAREWISE_")}
    env.update(PYTHONPATH=str(HOOK_DIR), SHAREWISE_OBSERVE_PORT=str(port), SHAREWISE_OBSERVE_NAME="podjob")
    proc = subprocess.Popen([sys.executable, "-c", STEPPER.format(n=100_000)], env=env, stdout=subprocess.DEVNULL)
    try:
        samples = scrape(port, until=lambda s: bool(s.get(STEPS_SERIES)))
    finally:
        proc.kill()
        proc.wait()
    assert samples[STEPS_SERIES][0][0]["name"] == "podjob"
    exports = subprocess.run([*SHAREWISE, "observe", "--print-env", "--port", "9500", "--name", "train", "--host",
                              "0.0.0.0"], capture_output=True, text=True, timeout=120)
    assert exports.returncode == 0
    lines = exports.stdout.splitlines()
    assert lines[:3] == ["export SHAREWISE_OBSERVE_PORT=9500", "export SHAREWISE_OBSERVE_HOST=0.0.0.0",
                         "export SHAREWISE_OBSERVE_NAME=train"]
    assert any(line.startswith(f"export PYTHONPATH={HOOK_DIR}") for line in lines)
    show = f"{sys.executable} -c 'import os; print(os.environ[\"PYTHONPATH\"])'"
    shell = subprocess.run(["bash", "-c", f"{exports.stdout}\n{show}"], capture_output=True, text=True, timeout=60,
                           env={**env, "PYTHONPATH": "/x"})
    assert shell.stdout.strip() == f"{HOOK_DIR}:/x"


# What a pair's CPU workers run with (``modes.worker_env``, the benchmark's jobs too): without it OpenMP threads spin
# while they wait, and two observed jobs sharing cores measured 4-7x slowdowns with half-widths of 32-92%.
CPU_KEYS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_WAIT_POLICY", "KMP_BLOCKTIME",
            "SHAREWISE_CORES", "SHAREWISE_PIN_CORES")
SHOW_ENV = ("import json, os, sys; json.dump({{'env': {{k: os.environ.get(k) for k in {keys!r}}}, "
            "'cores': sorted(os.sched_getaffinity(0))}}, open(sys.argv[1], 'w'))")


def _observed_env(tmp_path, monkeypatch, set_by_user: dict[str, str], cpu: bool | None = None) -> dict:
    """The environment and cores a command sees under ``run_observed`` (the wrapper ``sharewise observe`` calls)."""
    from sharewise.observe.launch import run_observed

    for key in CPU_KEYS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU visible, on any machine: the job computes on the CPU
    for key, value in set_by_user.items():
        monkeypatch.setenv(key, value)
    out = tmp_path / f"env-{len(list(tmp_path.glob('env-*')))}.json"
    code = run_observed([sys.executable, "-c", SHOW_ENV.format(keys=CPU_KEYS), str(out)], free_port(), cpu=cpu)
    assert code == 0
    return json.loads(out.read_text())


def test_a_cpu_job_starts_with_the_cpu_workers_environment_and_the_users_own_variables_win(tmp_path, monkeypatch):
    from sharewise.profiler.modes import CoreAssignment, available_cores, worker_env

    cores = available_cores()
    expected = worker_env(CoreAssignment(cores, len(cores)), base={})
    seen = _observed_env(tmp_path, monkeypatch, {})
    assert seen["env"] == {**{k: expected[k] for k in CPU_KEYS if k in expected}, "SHAREWISE_PIN_CORES": "1"}
    assert seen["env"]["OMP_WAIT_POLICY"] == "PASSIVE" and seen["cores"] == list(cores)
    mine = _observed_env(tmp_path, monkeypatch, {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "ACTIVE"})["env"]
    assert mine["OMP_NUM_THREADS"] == mine["MKL_NUM_THREADS"] == mine["OPENBLAS_NUM_THREADS"] == "1"
    assert mine["OMP_WAIT_POLICY"] == "ACTIVE" and mine["KMP_BLOCKTIME"] == expected["KMP_BLOCKTIME"]
    assert set(_observed_env(tmp_path, monkeypatch, {}, cpu=False)["env"].values()) == {None}  # --no-cpu-env

    exports = subprocess.run([*SHAREWISE, "observe", "--print-env", "--cpu-env", "--port", "9500"],
                             capture_output=True, text=True, timeout=120)
    assert exports.returncode == 0, exports.stderr
    show = f"{sys.executable} -c \"import os; print(*(os.environ.get(k) for k in {CPU_KEYS!r}))\""
    env = {k: v for k, v in os.environ.items() if k not in CPU_KEYS}
    shell = subprocess.run(["bash", "-c", f"{exports.stdout}\n{show}"], capture_output=True, text=True, timeout=60,
                           env={**env, "OMP_NUM_THREADS": "1"})
    assert shell.stdout.split() == ["1", "1", "1", "PASSIVE", expected["KMP_BLOCKTIME"], expected["SHAREWISE_CORES"],
                                    "1"]


def test_a_python_without_prometheus_client_runs_the_job_unobserved(tmp_path):
    bare = tmp_path / "bare"
    venv.create(bare, with_pip=False)  # a Python with the standard library only
    port = free_port()
    env = {**os.environ, "SHAREWISE_LIB": str(REPO)}  # sharewise's source folder holds no prometheus_client
    from sharewise.observe.launch import observe_environment

    env = observe_environment(port, "bare", base=env)
    env["SHAREWISE_LIB"] = str(REPO)
    done = subprocess.run([str(bare / "bin" / "python"), "-c", STEPPER.format(n=5)], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "done"
    assert done.stderr.count("\n") == 1 and "prometheus_client is not installed" in done.stderr


# ---- plans carry what observing takes -----------------------------------------------------------------------
def _plan():
    from sharewise.deploy.plan import DeployPlan, Device, JobDeploy, PlacementDeploy

    def job(job_id, workload, port, pct=None, mib=None):
        return JobDeploy(job_id, workload, False, 1.2, 1.4, None if mib is None else mib * 2**20, None,
                         None if mib is None else mib * 2**20, pct, None, None, observe_port=port)

    gpu = Device("0", "n1", 0, "GPU-aaaa", "csv")
    shared = PlacementDeploy((gpu,), "pair", "mps", 0.5, (job("j1", "bert", 9478, 60, 4000),
                                                          job("j2", "ncf", 9479, 40, 3000)))
    alone = PlacementDeploy((Device("1", "n1", 1, "GPU-bbbb", "csv"),), "alone", "exclusive", 0.0,
                            (job("j3", "lstm", 9480),))
    return DeployPlan("mps", "NVIDIA H200", ("mps",), "model.json", 2.0, 80e9, (shared, alone), (), 2.5, 2.0)


def test_plans_give_every_job_the_observe_environment_and_a_port_per_node(tmp_path):
    import json

    from sharewise.deploy import render
    from sharewise.deploy.plan import OBSERVE_HOST

    plan = json.loads(render(_plan(), "plan"))
    jobs = [j for p in plan["placements"] for j in p["jobs"]]
    assert [j["observe"]["port"] for j in jobs] == [9478, 9479, 9480]
    assert jobs[0]["observe"]["env"] == {"SHAREWISE_OBSERVE_PORT": "9478", "SHAREWISE_OBSERVE_HOST": OBSERVE_HOST,
                                         "SHAREWISE_OBSERVE_NAME": "bert"}
    slurm = render(_plan(), "slurm")
    line = next(x for x in slurm.splitlines() if "--job-name=j1" in x)
    assert ("--export=ALL,SHAREWISE_OBSERVE_PORT=9478,SHAREWISE_OBSERVE_HOST=0.0.0.0,SHAREWISE_OBSERVE_NAME=bert,"
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4000M") in line and line.endswith("metrics on n1:9478")
    assert "sharewise observe --" in slurm
    ray = render(_plan(), "ray")
    assert "'SHAREWISE_OBSERVE_PORT': '9479'" in ray


@pytest.mark.parametrize("fmt", ["k8s-dra", "hami"])
def test_kubernetes_pods_carry_the_port_the_env_and_scrape_annotations(fmt):
    yaml = pytest.importorskip("yaml", reason="the deploy extra: pip install 'sharewise[deploy]'")
    from sharewise.deploy import render

    pods = [d for d in yaml.safe_load_all(render(_plan(), fmt)) if d and d["kind"] == "Pod"]
    assert len(pods) == 3
    for pod, port, name in zip(pods, (9478, 9479, 9480), ("bert", "ncf", "lstm"), strict=True):
        container = pod["spec"]["containers"][0]
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["SHAREWISE_OBSERVE_PORT"] == str(port) and env["SHAREWISE_OBSERVE_NAME"] == name
        assert container["ports"] == [{"name": "sharewise", "containerPort": port}]
        ann = pod["metadata"]["annotations"]
        assert (ann["prometheus.io/scrape"], ann["prometheus.io/port"]) == ("true", str(port))
    client = pytest.importorskip("kubernetes.client", reason="the deploy extra: pip install 'sharewise[deploy]'")
    for pod in pods:  # the kubernetes client's models accept every field (they forbid unknown ones)
        assert client.ApiClient().sanitize_for_serialization(client.V1Pod.model_validate(pod)) == pod
