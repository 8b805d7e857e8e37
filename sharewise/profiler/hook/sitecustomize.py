"""sharewise's step hook at interpreter start (this folder is first on a command job's PYTHONPATH).

Installs ``sharewise.profiler.stephook`` (imported from ``$SHAREWISE_LIB``, the sharewise that launched the
job, without leaving that folder on ``sys.path``; for a job observed by environment alone,
``$SHAREWISE_OBSERVE_PORT`` without a launcher, the sharewise of the job's own Python), pins the interpreter to
its cores and arranges to die with its launcher when asked, then runs the ``sitecustomize`` this one shadows,
if there is one.
Nothing here may break the user's program: a failure is one line on stderr.
"""

import os
import sys


def _sharewise_setup():
    env = os.environ
    if env.get("SHAREWISE_DIE_WITH_PARENT") == "1":
        try:
            import ctypes
            import signal

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
            if os.getppid() == 1:  # the launcher died before prctl took effect
                os._exit(1)
        except (OSError, AttributeError):
            pass
    cores = env.get("SHAREWISE_CORES")
    if env.get("SHAREWISE_PIN_CORES") == "1" and cores and hasattr(os, "sched_setaffinity"):
        try:
            os.sched_setaffinity(0, {int(c) for c in cores.split(",")})
        except (OSError, ValueError):
            pass
    lib = env.get("SHAREWISE_LIB")
    observed = bool(env.get("SHAREWISE_OBSERVE_PORT"))  # without a launcher: sharewise from the job's own Python
    if not (env.get("SHAREWISE_PROGRESS") and lib) and not observed:
        return
    try:
        if lib:
            sys.path.insert(0, lib)
        try:
            from sharewise.profiler import stephook

            stephook.install()  # still on the path: the exporter's prometheus_client may live beside sharewise
        finally:
            if lib:
                sys.path.remove(lib)
    except Exception as exc:  # the program runs on; its steps go unreported, which the driver names
        sys.stderr.write(f"sharewise: step hook not installed: {type(exc).__name__}: {exc}\n")


def _chain():
    """Run the next ``sitecustomize`` on ``sys.path`` (the one this module shadows), as Python would have."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    mine = sys.modules.get("sitecustomize")
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules["sitecustomize"] = mine
        sys.stderr.write(f"sharewise: the shadowed sitecustomize ({spec.origin}) failed: {type(exc).__name__}: {exc}\n")


_sharewise_setup()
_chain()
