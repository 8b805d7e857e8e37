"""A job's step rate as Prometheus metrics, served from inside its own interpreter while it runs.

The step hook (``stephook``) feeds a ``StepExporter`` when ``$SHAREWISE_OBSERVE_PORT`` is set: a job started
by another scheduler (Kubernetes, Slurm, Ray, a shell) is then observed without sharewise starting it, and
``sharewise collect`` turns what Prometheus scraped into pair rows. Environment of the job:

- ``SHAREWISE_OBSERVE_PORT``: the port to serve ``/metrics`` on (required to observe);
- ``SHAREWISE_OBSERVE_HOST``: the address to bind (default ``127.0.0.1``; ``0.0.0.0`` where Prometheus
  scrapes from another machine, as in a pod);
- ``SHAREWISE_OBSERVE_NAME``: the workload name the job's rows are recorded under (default: the script's
  file stem, as ``cmd:python train.py`` is recorded ``train``).

Series, every one with the labels ``LABELS`` (``name``, ``device_kind`` ``cpu``/``cuda``, ``device`` the GPU
UUID or the CPU core list ``0-3,8``, ``device_name`` as profiles record it, ``host``, ``pid``)::

    sharewise_observed_info{name="train",device_kind="cpu",device="0-1",...} 1.0
    sharewise_observed_steps_total{...} 1234.0          # a counter: steps done by this process
    sharewise_observed_last_step_seconds{...} 1.7648e9  # unix time the last of them ended
    sharewise_observed_started_seconds{...} 1.7648e9    # unix time the job started (its interpreter, or its
                                                        # launcher's: $SHAREWISE_OBSERVE_STARTED)

The counter lets Prometheus compute rates; the last step's time lets ``collect`` compute a rate over any
stretch exactly (steps between two samples over the time between their last steps), whatever the scrape
interval; the start time tells it how long the process already loaded its device before its first step
(imports, data, model), time in which another job's rate is not its rate alone.

The server starts at the process's first counted step, once its device is known (a job picks its GPU before it
steps), on its own ``CollectorRegistry`` (never the user's own metrics), in a daemon thread of
``prometheus_client``. Nothing here may break the job: without ``prometheus_client`` in the job's Python, or
with the port taken (another program, or another process of the same job that stepped first), one line on
stderr and the job runs on unobserved.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

ENV_PORT = "SHAREWISE_OBSERVE_PORT"
ENV_HOST = "SHAREWISE_OBSERVE_HOST"
ENV_NAME = "SHAREWISE_OBSERVE_NAME"
ENV_STARTED = "SHAREWISE_OBSERVE_STARTED"  # unix time the job's launcher started (``sharewise observe`` sets it)
#: Every variable of the observe protocol: a job sharewise launches itself drops them from what it inherits.
OBSERVE_ENV = (ENV_PORT, ENV_HOST, ENV_NAME, ENV_STARTED)
DEFAULT_HOST = "127.0.0.1"
#: The port plans give the first observed job of a node (the next ones count up from it).
DEFAULT_PORT = 9478

STEPS = "sharewise_observed_steps"  # a counter: exposed as ``sharewise_observed_steps_total``
STEPS_SERIES = f"{STEPS}_total"
LAST_STEP = "sharewise_observed_last_step_seconds"
STARTED = "sharewise_observed_started_seconds"
INFO = "sharewise_observed"  # an info metric: exposed as ``sharewise_observed_info``
INFO_SERIES = f"{INFO}_info"
LABELS = ("name", "device_kind", "device", "device_name", "host", "pid")


@dataclass(frozen=True)
class ObserveSettings:
    """Where and under which name a job exports its steps: ``ObserveSettings(9478, "127.0.0.1", "train")``."""

    port: int
    host: str = DEFAULT_HOST
    name: str = ""

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ObserveSettings | None:
        """The settings ``environ`` asks for, or None where it asks for no observation (or gives a bad port)."""
        port = environ.get(ENV_PORT, "").strip()
        if not port:
            return None
        try:
            number = int(port)
            if not 0 < number < 65536:
                raise ValueError
        except ValueError:
            sys.stderr.write(f"sharewise observe: {ENV_PORT}={port!r} is not a port (1-65535); the job runs on "
                             "unobserved\n")
            return None
        return cls(number, environ.get(ENV_HOST) or DEFAULT_HOST, environ.get(ENV_NAME, ""))


def cpu_list(cores: Iterable[int]) -> str:
    """Return a core set in Linux's cpulist format: ``{0, 1, 2, 3, 8}`` -> ``"0-3,8"``.

    >>> cpu_list([8, 0, 1, 2, 3])
    '0-3,8'
    """
    ordered = sorted(set(int(c) for c in cores))
    parts, start = [], None
    for i, c in enumerate(ordered):
        if start is None:
            start = c
        if i + 1 == len(ordered) or ordered[i + 1] != c + 1:
            parts.append(str(c) if c == start else f"{start}-{c}")
            start = None
    return ",".join(parts)


def parse_cpu_list(text: str) -> frozenset[int]:
    """Return the cores of a cpulist (``"0-3,8"`` -> ``{0, 1, 2, 3, 8}``); ``ValueError`` if it is not one.

    >>> sorted(parse_cpu_list("0-2,8"))
    [0, 1, 2, 8]
    """
    cores: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        first, last = int(lo), int(hi or lo)
        if last < first:
            raise ValueError(f"{part!r}: a range runs upwards")
        cores.update(range(first, last + 1))
    return frozenset(cores)


def default_name(argv: list[str]) -> str:
    """The name a job is recorded under without ``SHAREWISE_OBSERVE_NAME``: its script's file stem (a package run
    with ``-m``: the package's name; ``-c``: ``python``).

    >>> default_name(["/home/u/train.py", "--lr", "1"]), default_name(["/u/mypkg/__main__.py"]), default_name(["-c"])
    ('train', 'mypkg', 'python')
    """
    first = argv[0] if argv and argv[0] not in ("", "-c", "-") else "python"
    stem = os.path.splitext(os.path.basename(first))[0]
    if stem == "__main__":
        stem = os.path.basename(os.path.dirname(first))
    return stem or "python"


def device_labels(torch: Any = None) -> dict[str, str]:
    """The device the calling process computes on, as labels: its current CUDA device once CUDA is initialized
    (UUID and name from NVML, else from torch), else the CPU cores it may run on.

    Example: ``{"device_kind": "cpu", "device": "0-1", "device_name": "AMD EPYC 7B13 (2 cores)"}``, or
    ``{"device_kind": "cuda", "device": "GPU-5c1d6f0e-...", "device_name": "NVIDIA H200"}``.
    """
    torch = sys.modules.get("torch") if torch is None else torch
    if torch is not None:
        try:
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                return _gpu_labels(torch, int(torch.cuda.current_device()))
        except Exception:  # a half-imported torch or a broken context: the host's cores are what is known
            pass
    from sharewise.profiler.device import cpu_model

    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    return {"device_kind": "cpu", "device": cpu_list(cores), "device_name": f"{cpu_model()} ({len(cores)} cores)"}


def _gpu_labels(torch: Any, index: int) -> dict[str, str]:
    try:
        from sharewise.profiler.device import visible_gpus

        gpus = visible_gpus()
    except Exception:  # no pynvml in the job's Python, or NVML cannot read a GPU: ask torch
        gpus = []
    if index < len(gpus):
        return {"device_kind": "cuda", "device": gpus[index].uuid, "device_name": gpus[index].name}
    props = torch.cuda.get_device_properties(index)
    uuid = str(getattr(props, "uuid", "") or "")
    return {
        "device_kind": "cuda",
        "device": uuid if uuid.startswith("GPU-") or not uuid else f"GPU-{uuid}",
        "device_name": str(props.name),
    }


class StepExporter:
    """Serves one process's step count (see the module docstring); ``on_step()`` after each counted step.

    Made at interpreter start (``load`` imports ``prometheus_client`` while sharewise's own folder may still be
    on ``sys.path``); the server starts at the first step. ``enabled`` turns False after a failure, said once.
    """

    def __init__(self, settings: ObserveSettings) -> None:
        self.settings = settings
        self.enabled = True
        self.started = False
        self.client: Any = None
        self.steps: Any = None
        self.last: Any = None
        self.labels: dict[str, str] = {}
        self.server: Any = None
        self.born = time.time()  # made at interpreter start, by the hook's sitecustomize

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> StepExporter | None:
        """The exporter ``environ`` asks for, its client loaded; None where none is asked for or it cannot run."""
        settings = ObserveSettings.from_env(environ)
        if settings is None:
            return None
        exporter = cls(settings)
        try:  # the wrapper that started this job began loading the machine first
            exporter.born = min(exporter.born, float(environ.get(ENV_STARTED, "inf")))
        except ValueError:
            pass
        return exporter if exporter.load() else None

    def load(self) -> bool:
        try:
            import prometheus_client
        except ImportError:
            self._fail(f"prometheus_client is not installed in this Python ({sys.executable}): pip install "
                       "prometheus-client")
            return False
        self.client = prometheus_client
        return True

    def on_step(self) -> None:
        """Count one step (starting the server at the first); never raises into the job."""
        if not self.enabled:
            return
        try:
            if not self.started:
                self.start()
            if self.enabled:
                self.steps.inc()
                self.last.set(time.time())
        except Exception as exc:  # a metrics failure must not become the job's
            self._fail(f"{type(exc).__name__}: {exc}")

    def start(self, torch: Any = None) -> None:
        """Bind the port and start serving (at the first step, once the device is known)."""
        self.started = True
        client, s = self.client, self.settings
        self.labels = {
            "name": s.name or default_name(sys.argv),
            **device_labels(torch),
            "host": socket.gethostname(),
            "pid": str(os.getpid()),
        }
        registry = client.CollectorRegistry(auto_describe=True)
        client.Info(INFO, "An observed job: its workload name, device and process.", registry=registry).info(
            self.labels
        )
        names = list(LABELS)
        self.steps = client.Counter(STEPS, "Steps (optimizer updates) this process has done.", names,
                                    registry=registry).labels(**self.labels)
        self.last = client.Gauge(LAST_STEP, "Unix time the last step ended.", names,
                                 registry=registry).labels(**self.labels)
        client.Gauge(STARTED, "Unix time the process's interpreter started.", names,
                     registry=registry).labels(**self.labels).set(self.born)
        try:
            served = client.start_http_server(s.port, addr=s.host, registry=registry)
            self.server = served[0] if isinstance(served, tuple) else None  # (server, thread) since 0.19
        except OSError as exc:
            self._fail(f"cannot serve metrics on {s.host}:{s.port} ({exc.strerror or exc}; another program, or "
                       "another process of this job, holds it)")

    def close(self) -> None:
        """Stop serving and free the port (a job never needs to: the server thread ends with the process)."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        self.enabled = False

    def _fail(self, why: str) -> None:
        self.enabled = False
        sys.stderr.write(f"sharewise observe: {why}; the job runs on unobserved\n")
