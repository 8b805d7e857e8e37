"""CLI: every command has help with an example, library errors become one line and exit 2."""

import json
import subprocess
import sys

import pytest

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
