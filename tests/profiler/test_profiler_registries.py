"""The profiler's plug-in registries (sharing modes, executors, workloads): one shape, read by everything."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sharewise.errors import ConfigError, MissingDependencyError, UnknownWorkloadError
from sharewise.profiler.config import RunConfig, default_mode
from sharewise.profiler.executors import EXECUTORS, ExecutorOptions, executor_factory
from sharewise.profiler.modes import SHARING_MODES, CoreAssignment, SharingMode, available_cores, modes_for, placements
from sharewise.profiler.workloads import REGISTRY
from sharewise.registry import Registry

# -- sharing modes -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SHARING_MODES.names())
def test_every_sharing_mode_follows_the_one_signature(name):
    mode = SHARING_MODES.get(name)
    assert isinstance(mode, SharingMode) and mode.name == name
    assert mode.device_kind in ("cpu", "cuda") and mode.summary and "\n" not in mode.summary
    device = "cpu" if mode.device_kind == "cpu" else "cuda:0"
    config = RunConfig(device=device, mode=name)  # validation accepts the mode on its device kind
    for n in (1, 2):
        assigned = mode.placements(config, n)
        assert len(assigned) == n and all(isinstance(a, CoreAssignment) for a in assigned)
        assert all(set(a.cores) <= set(available_cores()) and a.threads >= 1 for a in assigned)
    assert placements(config, 2) == mode.placements(config, 2)


@pytest.mark.parametrize("name", [n for n in SHARING_MODES if n != "mps"])
def test_modes_without_a_daemon_add_no_environment(name):
    mode = SHARING_MODES.get(name)
    device = "cpu" if mode.device_kind == "cpu" else "cuda:0"
    with mode.environment(RunConfig(device=device, mode=name)) as env:
        assert env == {}


def test_config_validation_reads_the_registry():
    assert isinstance(SHARING_MODES, Registry) and SHARING_MODES.kind == "sharing mode"
    assert modes_for("cpu") == ["cpu", "cpu-partition"] and modes_for("cuda") == ["timeslice", "mps"]
    assert (default_mode("cpu"), default_mode("cuda:1")) == ("cpu", "timeslice")
    with pytest.raises(ConfigError, match=r"mode must be one of \['cpu', 'cpu-partition', 'timeslice', 'mps'\]"):
        RunConfig(mode="gang")
    with pytest.raises(ConfigError, match=r"needs a CUDA device.*on the CPU use one of \['cpu', 'cpu-partition'\]"):
        RunConfig(mode="mps")
    with pytest.raises(ConfigError, match="is for CPU devices, got device 'cuda'; use 'timeslice' or 'mps'"):
        RunConfig(device="cuda", mode="cpu-partition")


def test_a_new_mode_is_its_object_and_one_registry_line(monkeypatch):
    """What adding a mode takes: a ``SharingMode`` in a module and one entry; validation and placement follow."""
    import types

    from sharewise.profiler.modes.base import share_all_cores

    module = types.ModuleType("sharewise_test.spread")
    module.MODE = SharingMode("spread", "cpu", "test mode", share_all_cores)
    monkeypatch.setitem(sys.modules, "sharewise_test.spread", module)
    monkeypatch.setattr(SHARING_MODES, "_entries", {**SHARING_MODES._entries, "spread": "sharewise_test.spread:MODE"})
    monkeypatch.setattr(SHARING_MODES, "_loaded", dict(SHARING_MODES._loaded))
    config = RunConfig(mode="spread")
    assert len(placements(config, 2)) == 2 and "spread" in modes_for("cpu")


def test_cpu_partition_refuses_more_workers_than_cores():
    with pytest.raises(ConfigError, match="needs at least"):
        placements(RunConfig(mode="cpu-partition"), len(available_cores()) + 1)


# -- executors ---------------------------------------------------------------------------------------------


def test_executor_factory_binds_the_options_and_fails_early():
    assert EXECUTORS.names() == ["local", "ray"]
    factory = executor_factory("local")
    assert factory.func is EXECUTORS.get("local") and factory.keywords == {"options": ExecutorOptions()}
    executor = factory(RunConfig(), "cpu0", None)
    assert executor.name == "local" and executor.spans_nodes is False
    assert executor.busy == 0 and executor.has_room()
    executor.close()
    with pytest.raises(ConfigError, match="--address is for --executor ray"):
        executor_factory("local", address="head:6379")
    with pytest.raises(ConfigError, match="unknown executor 'slurm'; known executors: local, ray"):
        executor_factory("slurm")


def test_every_executor_takes_the_one_constructor_signature():
    import inspect

    for name, cls in EXECUTORS.items():
        params = list(inspect.signature(cls).parameters)
        assert params == ["config", "device_name", "extra_env", "options"], name
        assert cls.name == name and isinstance(cls.spans_nodes, bool)
        for method in ("check", "has_room", "submit", "next_finished", "close"):
            assert callable(getattr(cls, method)), (name, method)
        assert isinstance(cls.busy, property), name


def test_ray_executor_without_ray_gives_the_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as if Ray were not installed
    with pytest.raises(MissingDependencyError, match=r"pip install 'sharewise\[ray\]'"):
        executor_factory("ray", max_retries=1)


# -- workloads ---------------------------------------------------------------------------------------------


def test_workload_registry_has_the_one_shape():
    assert isinstance(REGISTRY, Registry) and REGISTRY.kind == "workload"
    assert "resnet18" in REGISTRY and len(set(REGISTRY)) == len(REGISTRY)
    with pytest.raises(UnknownWorkloadError, match="unknown workload 'nope'; known workloads: a3c"):
        REGISTRY.get("nope")


def test_registries_and_the_worker_import_without_torch():
    """Listing names (CLI choices, help text) and the worker module's own import must not pull torch in."""
    code = (
        "import sys\n"
        "import sharewise.profiler.worker, sharewise.profiler.static, sharewise.profiler.campaign\n"
        "from sharewise.profiler.modes import SHARING_MODES, modes_for\n"
        "from sharewise.profiler.executors import EXECUTORS\n"
        "from sharewise.profiler.workloads import REGISTRY, resolve_specs\n"
        "modes_for('cpu'); EXECUTORS.get('local'); EXECUTORS.get('ray'); resolve_specs(['ncf'])\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "assert 'ray' not in sys.modules, 'ray was imported'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
