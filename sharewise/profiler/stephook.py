"""The step hook inside a command's interpreter: it reports steps and, when asked, the job's features.

``commands.launch`` puts ``profiler/hook/sitecustomize.py`` first on the job's ``PYTHONPATH``; Python imports
it at interpreter start, and it calls ``install()`` here (then chains to any other ``sitecustomize``).
Nothing in the user's script changes. What counts as one step:

- **An optimizer update.** PyTorch's global optimizer step hook
  (``torch.optim.optimizer.register_optimizer_step_post_hook``, registered as soon as the script imports
  ``torch``, never earlier) fires after every ``optimizer.step()`` that ran. Only the *first* optimizer
  that steps counts (a GAN's second optimizer would double the count); an update skipped by AMP's
  ``GradScaler`` (inf or NaN gradients) calls no ``optimizer.step()`` and is not a step; with gradient
  accumulation a step is one update, however many micro-batches it took.
- **An explicit call**, for loops without an optimizer (inference, custom updates):
  ``sys.audit("sharewise.step")`` after each iteration. It is plain Python, so the script needs nothing
  from sharewise and runs unchanged without it (with no audit hook the call does nothing).
- Several processes of one job (DDP ranks, a launcher and its workers): the first process that steps
  owns the count (a ``.owner`` file beside the progress file, per launch); the others report nothing.

On a GPU a step is stamped once its kernels are done: the hook synchronizes the job's current CUDA stream
first (``synchronize_current_stream``; ``SHAREWISE_SYNC_STEPS=0`` turns it off), as a built-in workload's
worker does after every step. Each step appends ``<step> <unix time>`` to ``$SHAREWISE_PROGRESS``
(``progress.ProgressWriter``, which continues from ``$SHAREWISE_START_STEP``). Once the count reaches
``$SHAREWISE_MAX_STEPS`` the hook raises ``SystemExit(0)`` from inside that ``optimizer.step()`` (or ``sys.audit``
call), so ``finally`` blocks and ``atexit`` handlers run; a script that swallows it is ended with ``os._exit(0)``
at its next step. With ``$SHAREWISE_OBSERVE_PORT`` set the steps are also served as Prometheus metrics
(``exporter``), with or without a progress file: without one, each process counts its own steps and the
first to bind the port is the one observed.

**Features.** With ``$SHAREWISE_FEATURES`` set the hook writes there (JSON, atomically): ``{"info": {...}}``
at the first step (pid, torch version, device), and ``{"info": ..., "features": {...}}`` once the driver
asks by creating ``<that path>.request`` holding ``{"trace_steps": K}``. Then, over the next steps of the
running job: one step under ``torch.profiler`` (dropped, as in ``trace.collect_events``), ``K`` profiled
steps in a ``sharewise::window`` range with memory tracked (``memory.MemoryTracker``), then one step with
input shapes recorded for the FLOP count. Reported: the kernel timeline features (``trace.trace_features``:
kernels per step, launch rate, busy fraction, kernel duration mean/p95/p99, time shares), peak allocated
and reserved memory on CUDA (RSS growth on CPU), ``f_flops_per_step`` (sharewise's FLOP formulas, those of
``flops.make_flop_counter``, applied to the profiler's record of each op's input shapes), ``f_param_bytes``
(the storages of every stepped optimizer's parameters) and ``f_device_mem_bytes``. A failure is written as
``{"error": ...}`` and never reaches the user's code.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import sys
import threading
import time
import weakref
from typing import Any

from sharewise.profiler import progress
from sharewise.profiler.exporter import StepExporter

#: The event of the explicit call: ``sys.audit("sharewise.step")``.
AUDIT_EVENT = "sharewise.step"
#: ``0`` turns off the synchronization at each step (on by default wherever the hook counts steps).
ENV_SYNC = "SHAREWISE_SYNC_STEPS"
_TARGET = "torch.optim.optimizer"


def write_json(path: str, payload: dict) -> None:
    """Write ``payload`` to ``path`` atomically (temp file, then rename), so a reader never sees half of it."""
    _write_text(path, json.dumps(payload))


class StepHook:
    """Counts a job's steps and writes them to its progress file (see the module docstring).

    ``environ`` holds the protocol variables (``progress.ENV_*``, ``commands.ENV_FEATURES``,
    ``commands.ENV_TOKEN``, ``exporter.ENV_*``); a hook with neither ``SHAREWISE_PROGRESS`` nor
    ``SHAREWISE_OBSERVE_PORT`` counts nothing.
    """

    def __init__(self, environ: dict[str, str]) -> None:
        from sharewise.profiler.commands import ENV_FEATURES, ENV_TOKEN

        self.path = environ.get(progress.ENV_PATH) or None
        self.start_step = int(environ.get(progress.ENV_START_STEP) or 0)
        limit = environ.get(progress.ENV_MAX_STEPS)
        self.max_steps = int(limit) if limit else None
        self.features_path = environ.get(ENV_FEATURES) or None
        self.sync = environ.get(ENV_SYNC, "1") != "0"
        self.token = environ.get(ENV_TOKEN, "")
        self.writer: progress.ProgressWriter | None = None
        self.owner_pid: int | None = None
        self.declined_pid: int | None = None
        self.lead: weakref.ref | None = None
        self.optimizers: weakref.WeakSet = weakref.WeakSet()
        self.profile: _FeatureRun | None = None
        self.features_done = False
        self.stopping = False
        self.info: dict[str, Any] = {}
        self.exporter = StepExporter.from_env(environ)
        self._lock = threading.Lock()

    # -- the two sources of steps ---------------------------------------------------------------------------
    def on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """The global optimizer post-step hook: count the updates of the first optimizer that steps."""
        self.optimizers.add(optimizer)
        lead = self.lead() if self.lead is not None else None
        if lead is None:  # the first optimizer (or the first one was freed: a new training phase)
            self.lead = weakref.ref(optimizer)
            lead = optimizer
        if optimizer is lead:
            self.step("optimizer")

    def on_audit(self, event: str, args: tuple) -> None:
        """The audit hook: ``sys.audit("sharewise.step")`` is one step."""
        if event == AUDIT_EVENT:
            self.step("call")

    # -- one step -------------------------------------------------------------------------------------------
    def step(self, source: str = "call") -> int | None:
        """Record one step of this process (if it owns the count); return the count, or None."""
        with self._lock:
            try:
                if not self._claim(source):
                    return None
                if self.sync:
                    synchronize_current_stream()
                count = self.writer.step()
            except OSError as exc:  # the progress file is unwritable: the job runs on, unreported
                sys.stderr.write(f"sharewise step hook: cannot report steps to {self.path}: {exc}\n")
                self.path, self.owner_pid, self.exporter = None, None, None
                return None
            if self.exporter is not None:
                self.exporter.on_step()
        if self.features_path is not None and not self.features_done:
            self._features_tick()
        if self.max_steps is not None and count >= self.max_steps:
            if self.stopping:  # the script swallowed the SystemExit and stepped on
                os._exit(0)
            self.stopping = True
            raise SystemExit(0)
        return count

    def _claim(self, source: str) -> bool:
        pid = os.getpid()
        if self.owner_pid == pid:
            return True
        if self.declined_pid == pid or self.owner_pid is not None:
            return False  # another process owns the count, or a fork of the owner
        if self.path is None:  # observed only: no progress file (or none is asked for)
            if self.exporter is None:
                return False
            self.owner_pid, self.writer = pid, _Count(self.start_step)
            self.info = _job_info(source)
            return True
        owner = f"{self.path}.owner"
        mine = f"{self.token} {pid}"
        try:
            fd = os.open(owner, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            with os.fdopen(fd, "w") as fh:
                fh.write(mine)
        except FileExistsError:
            try:
                with open(owner) as fh:
                    token, _, other = fh.read().partition(" ")
            except OSError:
                token, other = "", ""
            if token == self.token and other.strip() != str(pid):
                self.declined_pid = pid
                return False
            _write_text(owner, mine)  # a previous start of the job left it: take over
        self.owner_pid = pid
        self.writer = progress.ProgressWriter(self.path, self.start_step)
        self.info = _job_info(source)
        if self.features_path is not None:
            _try_write(self.features_path, {"info": self.info})
        return True

    # -- features ---------------------------------------------------------------------------------------------
    def _features_tick(self) -> None:
        try:
            if self.profile is None:
                request = f"{self.features_path}.request"
                if not os.path.exists(request):
                    return
                with open(request, encoding="utf-8") as fh:
                    steps = int(json.load(fh).get("trace_steps", 3))
                self.profile = _FeatureRun(max(1, steps))
                return
            features = self.profile.tick()
            if features is None:
                return
            features.update(_param_features(list(self.optimizers)))
            self._finish({"info": self.info, "features": features})
        except Exception as exc:  # never into the user's step
            if self.profile is not None:
                self.profile.abandon()
            self._finish({"info": self.info, "error": f"{type(exc).__name__}: {exc}"})

    def shutdown(self) -> None:
        """At exit: close a feature measurement the script ended in the middle of (an open profiler crashes
        the interpreter's teardown)."""
        if self.profile is not None:
            self.profile.abandon()
            self._finish({"info": self.info, "error": "the job ended during the feature measurement", "ended": True})

    def _finish(self, payload: dict) -> None:
        self.features_done = True
        self.profile = None
        _try_write(self.features_path, payload)


class _Count:
    """The writer of a job observed without a progress file: it counts, and writes nothing."""

    def __init__(self, start_step: int) -> None:
        self.steps = int(start_step)

    def step(self) -> int:
        self.steps += 1
        return self.steps


def _write_text(path: str, text: str) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _try_write(path: str, payload: dict) -> None:
    try:
        write_json(path, payload)
    except OSError as exc:
        sys.stderr.write(f"sharewise step hook: cannot write {path}: {exc}\n")


def synchronize_current_stream() -> None:
    """Wait for the work queued on the job's current CUDA stream, if the job uses CUDA (else nothing).

    A step is stamped when ``optimizer.step()`` returns, which on a GPU is when its kernels are *queued*:
    without this, a step's time is its launch time, a window's edges are off by the launch queue, and a
    paused job (SIGSTOP stops the CPU, not kernels already queued) keeps the device busy for as much work as
    was queued. Synchronized, at most one step's kernels are ever in flight, as in a built-in workload's
    worker, which synchronizes after every step too.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return
    try:
        if torch.cuda.is_initialized():
            torch.cuda.current_stream().synchronize()
    except Exception as exc:  # a half-imported torch or a broken context: the step is stamped as it is
        if not _SYNC_WARNED:
            _SYNC_WARNED.append(True)
            sys.stderr.write(f"sharewise step hook: cannot synchronize the CUDA stream: {type(exc).__name__}: {exc}\n")


_SYNC_WARNED: list[bool] = []  # the failure to synchronize is said once, not at every step


def _job_info(source: str) -> dict[str, Any]:
    """What the driver records about the job: ``{"pid": 4242, "torch_version": "2.13.0", "device": "cpu",
    "counts": "optimizer"}``."""
    torch = sys.modules.get("torch")
    info: dict[str, Any] = {"pid": os.getpid(), "counts": source, "python": sys.version.split()[0]}
    if torch is not None:
        info["torch_version"] = str(getattr(torch, "__version__", ""))
        try:
            info["device"] = str(_job_device(torch))
        except Exception:  # a half-imported torch: the device stays unknown
            pass
    return info


def _job_device(torch: Any) -> Any:
    """The device the job computes on: its current CUDA device once it initialized CUDA, else the CPU."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _param_features(optimizers: list) -> dict[str, float]:
    """``f_param_bytes``: bytes of the parameter storages of every optimizer that stepped (each storage once)."""
    storages: dict[int, int] = {}
    for opt in optimizers:
        for group in getattr(opt, "param_groups", []):
            for p in group.get("params", []):
                try:
                    storages.setdefault(p.untyped_storage()._cdata, int(p.untyped_storage().nbytes()))
                except (RuntimeError, NotImplementedError, AttributeError):
                    storages.setdefault(id(p), int(p.numel() * p.element_size()))
    return {"f_param_bytes": float(sum(storages.values()))} if storages else {}


class _FeatureRun:
    """One feature measurement over the running job's next steps; ``tick()`` after each step (see module)."""

    def __init__(self, trace_steps: int) -> None:
        import torch
        import torch.utils.flop_counter  # noqa: F401
        from torch.profiler import ProfilerActivity

        import sharewise.profiler.flops  # noqa: F401 - imported (torch's FLOP registry too) before any session
        import sharewise.profiler.memory  # noqa: F401
        import sharewise.profiler.trace  # noqa: F401

        self.torch = torch
        self.trace_steps = trace_steps
        self.device = _job_device(torch)
        self.activities = [ProfilerActivity.CPU] + (
            [ProfilerActivity.CUDA] if self.device.type == "cuda" else []
        )
        self.phase = "warm"
        self.done_steps = 0
        self.features: dict[str, float] = {}
        self.window: Any = None
        self.tracker: Any = None
        self.began = 0.0
        self.prof = torch.profiler.profile(activities=self.activities)
        self.prof.__enter__()

    def _sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def tick(self) -> dict[str, float] | None:
        """Advance by one finished step; return the features once they are complete."""
        from sharewise.profiler.trace import WINDOW_NAME

        if self.phase == "warm":  # the step under a fresh profiler is dropped: it pays its set-up costs
            from sharewise.profiler.memory import MemoryTracker

            self._sync()
            self.window = self.torch.profiler.record_function(WINDOW_NAME)
            self.window.__enter__()
            self.tracker = MemoryTracker(self.device)
            self.tracker.start()
            self.began = time.perf_counter()
            self.phase = "window"
            return None
        if self.phase == "window":
            self.done_steps += 1
            if self.done_steps < self.trace_steps:
                return None
            self._sync()
            wall = time.perf_counter() - self.began
            self.window.__exit__(None, None, None)
            self.window = None
            memory = self.tracker.stop()
            self.tracker = None
            self.prof.__exit__(None, None, None)
            self.features = window_features(self.prof, self.device, self.trace_steps)
            self.features.update(memory)
            self.features["f_step_time_ms"] = wall / self.trace_steps * 1e3
            # Free this profile's results before the next profiler session starts: collected by the garbage
            # collector after that, they crashed the job (SIGSEGV) in about half the runs (torch 2.13, CPU).
            self.prof = None
            gc.collect()
            self.prof = self.torch.profiler.profile(activities=self.activities, record_shapes=True)
            self.prof.__enter__()
            self.phase = "flops"
            return None
        self.prof.__exit__(None, None, None)
        prof, self.prof = self.prof, None
        from sharewise.profiler.recorded_flops import profiled_flops  # not at the job's interpreter start

        self.features["f_flops_per_step"] = profiled_flops(prof)
        del prof
        gc.collect()
        return self.features

    def abandon(self) -> None:
        """Close whatever is open after a failure."""
        for obj in (self.window, self.prof):
            if obj is not None:
                try:
                    obj.__exit__(None, None, None)
                except Exception:  # already closed, or the failure was in closing it
                    pass
        if self.tracker is not None:
            try:
                self.tracker.stop()
            except Exception:  # not started
                pass
        self.window = self.prof = self.tracker = None


def window_features(prof: Any, device: Any, steps: int) -> dict[str, float]:
    """The timeline features of a finished profile holding one ``sharewise::window`` range of ``steps`` steps."""
    from sharewise.profiler.trace import events_from_profiler, profiler_events, trace_features, window_seconds

    try:
        raw = profiler_events(prof)
    except AttributeError:  # a torch whose raw results lack a field read there: torch's own list
        raw = list(prof.events())
    events = events_from_profiler(raw, device.type)
    return trace_features(events, window_seconds(events), steps, device.type)


def install(environ: dict[str, str] | None = None) -> StepHook | None:
    """Install the step hook in this interpreter (called by the hook's ``sitecustomize``); idempotent.

    Registers the audit hook of the explicit call now and the optimizer hook once ``torch.optim.optimizer``
    is imported (now, if it already is). Returns the hook, or None when the environment asks for none.
    """
    env = os.environ if environ is None else environ
    from sharewise.profiler.commands import ENV_NO_HOOK
    from sharewise.profiler.exporter import ENV_PORT

    if not (env.get(progress.ENV_PATH) or env.get(ENV_PORT)) or env.get(ENV_NO_HOOK) == "1":
        return None
    existing = getattr(sys, "_sharewise_step_hook", None)
    if existing is not None:
        return existing
    hook = StepHook(dict(env))
    sys._sharewise_step_hook = hook  # type: ignore[attr-defined]
    sys.addaudithook(hook.on_audit)
    atexit.register(hook.shutdown)
    when_imported(_TARGET, lambda module: module.register_optimizer_step_post_hook(hook.on_optimizer_step))
    return hook


def when_imported(name: str, callback) -> None:
    """Call ``callback(module)`` once module ``name`` is imported (now, if it is), without importing it."""
    if name in sys.modules:
        callback(sys.modules[name])
        return
    sys.meta_path.insert(0, _AfterImport(name, callback))


class _AfterImport:
    """A meta path finder that runs a callback right after one module's code has run (a post-import hook)."""

    def __init__(self, name: str, callback) -> None:
        self.name = name
        self.callback = callback
        self.busy = False

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name or self.busy:
            return None
        self.busy = True
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self.busy = False
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _CallbackLoader(spec.loader, self)
        return spec

    def fire(self, module: Any) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        try:
            self.callback(module)
        except Exception as exc:  # the user's program goes on; only the steps go unreported
            sys.stderr.write(f"sharewise step hook: not installed on {self.name}: {type(exc).__name__}: {exc}\n")


class _CallbackLoader:
    """Wraps a module's loader: runs the module, then the post-import callback; all else is the loader's."""

    def __init__(self, loader: Any, finder: _AfterImport) -> None:
        self._loader = loader
        self._finder = finder

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        module.__loader__ = self._loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        self._finder.fire(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)
