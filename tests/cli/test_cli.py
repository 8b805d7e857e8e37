"""CLI: every command has help with an example, library errors become one line and exit 2."""

import json
import subprocess
import sys

import pytest
from conftest import make_literal_dataset

from sharewise.cli import app, main


def _run(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main(args)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def _commands():
    import typer.main

    group = typer.main.get_command(app)
    names = []
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):
            names.extend((f"{name} {sub}", subcmd) for sub, subcmd in cmd.commands.items())
        else:
            names.append((name, cmd))
    return names


@pytest.mark.parametrize("name, cmd", _commands(), ids=[n for n, _ in _commands()])
def test_every_command_has_help_and_an_example(name, cmd):
    assert cmd.help and len(cmd.help.strip()) > 20, f"{name} needs help text"
    assert "Example" in cmd.help, f"{name}'s help needs an example"


def test_python_dash_m_works():
    proc = subprocess.run(
        [sys.executable, "-m", "sharewise", "--help"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and "profile" in proc.stdout


def test_workloads_json_lists_the_registry(capsys):
    from sharewise.profiler.workloads import REGISTRY

    main(["workloads", "--json"])
    items = json.loads(capsys.readouterr().out)
    assert {i["name"] for i in items} == set(REGISTRY)
    assert all({"name", "family", "default_batch_size"} <= set(i) for i in items)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["profile", "no_such_model", "--out", "{tmp}/d"], "unknown workload 'no_such_model'"),
        (["profile", "{tmp}/missing.py:Model", "--out", "{tmp}/d"], "not found"),
        (["profile", "{fixtures}/user_workloads.py:Nope", "--out", "{tmp}/d"], "has no class 'Nope'"),
        (["profile", "{fixtures}/user_workloads.py:NoStep", "--out", "{tmp}/d"], "lacks method(s) step"),
        (["pairs", "-w", "ncf", "--mode", "mps", "--out", "{tmp}/d"], "needs a CUDA device"),
        (["pairs", "-w", "ncf", "--device", "tpu", "--out", "{tmp}/d"], "device must be"),
        (["pairs", "-w", "ncf,ncf", "--out", "{tmp}/d"], "listed twice"),
        (["pairs", "-w", "ncf", "--executor", "slurm", "--out", "{tmp}/d"], "unknown executor"),
        (["show", "{tmp}/nothing"], "does not exist"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, needle, tmp_path, capsys):
    from conftest import FIXTURES

    args = [a.format(tmp=tmp_path, fixtures=FIXTURES) for a in args]
    code, _, err = _run(args, capsys)
    assert code == 2
    assert needle in err
    assert err.startswith("error: ") and err.strip().count("\n") == 0
    assert "Traceback" not in err


# ---- usage errors through the installed console script -------------------------------------------------
def _console_script() -> str:
    """The ``sharewise`` entry point installed next to this interpreter (what a user types)."""
    import shutil
    from pathlib import Path

    script = Path(sys.executable).with_name("sharewise")
    found = str(script) if script.is_file() else shutil.which("sharewise")
    if not found:
        pytest.skip("the sharewise console script is not installed (pip install -e .)")
    return found


@pytest.mark.parametrize(
    "args, needle",
    [
        (["evaluate", "reference", "--no-such-option", "2"], "No such option"),
        (["simulate"], "Missing argument"),
        (["profile", "--out", "x"], "Missing argument"),
        (["simulate", "t.csv", "--gpus", "abc"], "Invalid value"),
        (["frobnicate"], "No such command"),
        (["import", "gavel"], "Missing argument"),
    ],
    ids=["unknown option", "missing argument", "missing workload", "bad value", "unknown command", "import"],
)
def test_usage_errors_give_the_usage_message_and_exit_2(args, needle):
    proc = subprocess.run([_console_script(), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert needle in proc.stderr and "Usage:" in proc.stderr


# Commands that run no workload must start fast: no torch, and no matplotlib unless they draw.
_NO_HEAVY_IMPORTS = """
import sys, json
from sharewise.cli import main
args = json.loads(sys.argv[1])
try:
    main(args)
except SystemExit as exc:
    assert not exc.code, exc.code
heavy = sorted(m for m in ("torch", "matplotlib") if m in sys.modules)
print(json.dumps(heavy))
"""


@pytest.mark.parametrize(
    "args",
    [
        ["show", "reference"],
        ["show", "reference", "--json"],
        # What they import does not depend on the data: a 4-workload dataset trains and cross-validates in a
        # fraction of the shipped reference's time (7-19 s on the busy machine for these two).
        ["train", "{data}", "--out", "{tmp}/m.json"],
        ["evaluate", "{data}", "--json"],
        ["policies"],
    ],
    ids=lambda a: " ".join(a[:2]).replace("{data}", "dataset"),
)
def test_commands_that_run_no_workload_import_neither_torch_nor_matplotlib(args, tmp_path):
    import json as _json

    data = tmp_path / "d"
    if "{data}" in args:
        make_literal_dataset(data)
    argv = [a.format(tmp=tmp_path, data=data) for a in args]
    proc = subprocess.run(
        [sys.executable, "-c", _NO_HEAVY_IMPORTS, _json.dumps(argv)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    heavy = _json.loads(proc.stdout.strip().splitlines()[-1])
    assert heavy == [], f"'sharewise {' '.join(args)}' imported {heavy}"


def test_print_json_writes_what_any_parser_reads(capsys):
    import numpy as np

    from sharewise.cli.common import PRETTY_MAX_CHARS, print_json

    obj = {"nan": float("nan"), "inf": np.float64("inf"), "n": np.int64(4), "f": np.float32(1.5),
           "a": np.array([1.0, np.nan]), "t": (1, 2), 7: "int key", "ok": np.bool_(True)}
    print_json(obj)
    out = capsys.readouterr().out
    assert "\n  " in out  # small: indented for a person
    assert json.loads(out) == {"nan": None, "inf": None, "n": 4, "f": 1.5, "a": [1.0, None], "t": [1, 2],
                               "7": "int key", "ok": True}
    print_json({"big": 2**70, "x": [np.nan]})  # beyond 64 bits: orjson refuses, the standard library writes it
    assert json.loads(capsys.readouterr().out) == {"big": 2**70, "x": [None]}
    long = {"ids": [f"job-{i:07d}" for i in range(PRETTY_MAX_CHARS // 10)]}
    print_json(long)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and json.loads(out) == long  # large: one compact line


def test_simulate_and_run_declare_their_shared_options_once():
    # One declaration (cli/options.py) serves both: the same flags, defaults and help in each command.
    import typer

    group = typer.main.get_command(app)
    params = {cmd: {p.name: p for p in group.commands[cmd].params} for cmd in ("simulate", "run")}
    shared = ["device_name", "max_slowdown", "round_s", "oracle", "observe", "predictions", "model", "group_by",
              "trace_format"]
    for name in shared:
        a, b = params["simulate"][name], params["run"][name]
        assert (a.opts, a.secondary_opts, a.default, a.help) == (b.opts, b.secondary_opts, b.default, b.help), name


@pytest.mark.parametrize("name, cmd", _commands(), ids=[n for n, _ in _commands()])
def test_every_command_summary_is_one_whole_sentence(name, cmd):
    # The CLI reference's list of commands (mkdocs-click) shows a command's help up to its first line break, and
    # `sharewise --help` its first paragraph: both must be the same whole sentence.
    import inspect

    text = inspect.cleandoc(cmd.short_help or cmd.help)
    first_line = text.splitlines()[0].strip()
    first_paragraph = " ".join(text.split("\n\n")[0].split())
    assert first_line == first_paragraph, f"{name}: the summary wraps onto a second line: {first_paragraph!r}"
    assert first_line.endswith((".", "?", "!")), f"{name}: the summary is not a whole sentence: {first_line!r}"


@pytest.mark.parametrize("data", ["reference", "reference-h200"])
def test_show_prints_counts_devices_and_modes_as_text_not_python_reprs(data, capsys):
    from sharewise.app.profiling import show

    overview = show(data).overview
    main(["show", data])
    out = capsys.readouterr().out
    status = ", ".join(f"{key} {count}" for key, count in overview["status"].items())
    assert f"{overview['pairs']} pairs ({status}); devices {', '.join(overview['devices'])}; " in out, out
    assert f"; modes {', '.join(overview['modes'])}\n" in out, out
    reprs = [mark for mark in ("['", "']", "{'", "'}") if mark in out]
    assert not reprs, f"Python reprs {reprs} in the output of sharewise show {data}:\n{out}"


def test_demo_without_xgboost_says_what_to_install_before_measuring_anything(tmp_path, monkeypatch, capsys):
    # A None entry in sys.modules is how Python marks a module as not importable: the demo sees an install
    # without the cpu or gpu extra, as from a wheel installed without extras, and XGBoost stays installed.
    monkeypatch.setitem(sys.modules, "xgboost", None)
    code, _, err = _run(["demo", "--out", str(tmp_path / "demo-out")], capsys)
    assert code == 2, err
    assert err.startswith("error: the predictor needs XGBoost; install it with \"pip install 'sharewise[cpu]'\""), err
    assert not (tmp_path / "demo-out").exists(), "the demo measured before it checked what training needs"


def test_a_campaigns_summary_prints_its_status_counts_as_text(capsys):
    from sharewise.app.profiling import PairsResult, show
    from sharewise.cli.profiler import render_pairs
    from sharewise.profiler.campaign import CampaignSummary

    summary = CampaignSummary("d", total=3, measured=2, skipped=1, by_status={"ok": 1, "failed": 1},
                              failures=[("a3c", "ncf", "failed", "exit code 1")], seconds=12.0)
    render_pairs(PairsResult(summary, show("reference").pairs))
    out = capsys.readouterr().out
    assert "2 measured, 1 already done, 0 profiled; status ok 1, failed 1\n" in out, out
    assert "{'" not in out and "['" not in out, out
