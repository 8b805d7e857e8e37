"""The CLI imports what its command uses (issue 50): reading and planning commands never import torch, Ray, the
profiler's executors or matplotlib.

Each command runs as the console script would, in a fresh process, and an ``atexit`` hook writes the modules
that process had loaded when it ended; the test reads that list. Each case also names modules its command must
have loaded, so a command that failed early (and imported little) cannot pass. ``sharewise workloads`` reads
the built-in workloads' class attributes from their source (``describe_workload``), held here to what the
classes themselves say.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
from conftest import make_literal_dataset

from sharewise.profiler.workloads import REGISTRY, _class_attributes, describe_workload, load_workload_class

#: What a command that runs no workload, starts no executor and draws nothing must not import.
FORBIDDEN = ("torch", "ray", "sharewise.profiler.executors", "matplotlib")

# Runs ``main`` with each argv of argv[1] (a JSON list of argv lists) as the console script would, and writes the
# loaded modules to argv[2] at exit, after whatever the commands did.
_RUN = """
import atexit, json, sys
argvs, out = json.loads(sys.argv[1]), sys.argv[2]

def report():
    with open(out, "w") as fh:
        json.dump(sorted(sys.modules), fh)

atexit.register(report)
from sharewise.cli import main

for argv in argvs:
    try:
        main(argv)
    except SystemExit as exc:
        if exc.code:
            raise
"""


def _loaded(argvs: list[list[str]], tmp_path) -> set[str]:
    out = tmp_path / "modules.json"
    proc = subprocess.run(
        [sys.executable, "-c", _RUN, json.dumps(argvs), str(out)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return set(json.loads(out.read_text()))


def _forbidden(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == f or m.startswith(f + ".") for f in FORBIDDEN))


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """A model trained on the 4-workload literal dataset, and a queue of its workloads: what recommend needs."""
    from sharewise.predictor import train_model

    base = tmp_path_factory.mktemp("recommend")
    ds = make_literal_dataset(base / "data")
    train_model(ds.read_profiles(), ds.read_pairs()).save(base / "model.json")
    pd.DataFrame({"job_id": [f"j{i}" for i in range(6)], "workload": ["w0", "w1", "w2", "w3", "w0", "w1"]}).to_csv(
        base / "queue.csv", index=False
    )
    return base


_RECOMMEND = ["recommend", "-m", "{m}", "-d", "{d}", "-q", "{q}", "--gpus", "3"]


@pytest.mark.parametrize(
    "argv, needs",
    [
        pytest.param(["--help"], {"typer"}, id="--help"),
        pytest.param(["workloads"], {"sharewise.app.profiling"}, id="workloads"),
        pytest.param(["workloads", "--json"], {"sharewise.app.profiling"}, id="workloads --json"),
        pytest.param(["show", "reference"], {"sharewise.datasets.store"}, id="show"),
        pytest.param(["show", "reference", "--json"], {"sharewise.datasets.store"}, id="show --json"),
        pytest.param(_RECOMMEND, {"xgboost", "sharewise.planner.pairing"}, id="recommend"),
        pytest.param([*_RECOMMEND, "--json"], {"scipy.optimize"}, id="recommend --json"),
        pytest.param(
            [*_RECOMMEND, "--emit", "slurm", "--node", "n1"], {"sharewise.deploy.slurm"}, id="recommend --emit"
        ),
    ],
)
def test_a_command_that_runs_no_workload_imports_none_of_the_heavy_modules(argv, needs, planned, tmp_path):
    argv = [a.format(m=planned / "model.json", d=planned / "data", q=planned / "queue.csv") for a in argv]
    modules = _loaded([argv], tmp_path)
    assert needs <= modules, f"'sharewise {' '.join(argv)}' did not get as far as {sorted(needs - modules)}"
    assert _forbidden(modules) == [], f"'sharewise {' '.join(argv)}' imported {_forbidden(modules)}"


def test_no_command_help_imports_the_heavy_modules(tmp_path):
    """Every command's and every group's ``--help``, in one process: the help comes from the registries'
    names, never from the plug-ins they name."""
    import typer

    from sharewise.cli import app

    group = typer.main.get_command(app)
    argvs = [["--help"]]
    for name, cmd in group.commands.items():
        argvs.append([name, "--help"])
        argvs.extend([name, sub, "--help"] for sub in getattr(cmd, "commands", {}))
    assert ["recommend", "--help"] in argvs and ["import", "gavel", "--help"] in argvs
    modules = _loaded(argvs, tmp_path)
    assert _forbidden(modules) == [], f"a command's --help imported {_forbidden(modules)}"


@pytest.mark.parametrize("name", REGISTRY.names())
def test_the_listing_of_a_workload_is_what_its_class_describes(name):
    assert describe_workload(name) == load_workload_class(name)().describe()


def test_class_attributes_are_read_from_source_where_they_are_literals(tmp_path, monkeypatch):
    """Inherited literals count, a subclass's own win, and whatever is not a literal (a name, a call) or sits in a
    decorated class is unknown: ``describe_workload`` then imports the class and asks it."""
    (tmp_path / "wl_source_mod.py").write_text(
        "import functools\n"
        "from sharewise.profiler.workloads.base import Workload\n"
        "SIZE = 3\n"
        "class A(Workload):\n"
        "    name = 'a'\n"
        "    family: str = 'fam'\n"
        "    default_batch_size = SIZE\n"
        "class B(A):\n"
        "    name = 'b'\n"
        "    sizes = ('tiny',)\n"
        "@functools.total_ordering\n"
        "class C(A):\n"
        "    name = 'c'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    b = _class_attributes("wl_source_mod", "B")
    assert (b["name"], b["family"], b["sizes"], b["kind"], b["description"]) == ("b", "fam", ("tiny",), "train", "")
    assert "default_batch_size" not in b  # SIZE is a name: unknown here, so the class would be imported
    assert _class_attributes("wl_source_mod", "C") == {}
    assert _class_attributes("wl_source_mod", "Missing") == {}


def test_the_policy_package_still_names_the_engine_types():
    """``sharewise.policy`` loads the engine's policy types on first use (its registry is read without numpy)."""
    import sharewise.policy as policy
    from sharewise.engine import policy_types

    assert policy.Queue is policy_types.Queue and policy.ClusterState is policy_types.ClusterState
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        policy.Nope  # noqa: B018
