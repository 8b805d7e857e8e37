"""Command-line interface: each command parses its options, calls one function of ``sharewise.app``, renders.

One module per area registers its commands on ``app`` (``register(app)``). ``main`` is the one place that
turns failures into exit codes: a library error (``SharewiseError``) is one line on stderr and exit 2; a
usage error (unknown option or command, missing argument, bad value) is click's usage message and exit 2;
Ctrl-C is exit 130 with measured data kept. ``python -m sharewise`` runs the same ``main``.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import sys

import typer

from sharewise.errors import SharewiseError

app = typer.Typer(
    name="sharewise",
    help="Decide which deep-learning jobs may share a GPU: profile, measure pairs, train, predict, pair, simulate.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)

# The command areas, in the order ``sharewise --help`` lists them. A module that fails to import is a bug
# and fails loudly: a silently missing command is worse.
COMMAND_MODULES = ("profiler", "predictor", "imports", "recommend", "policy", "run", "observe", "report")

for _name in COMMAND_MODULES:
    importlib.import_module(f"sharewise.cli.{_name}").register(app)


def _click_exception_types() -> tuple[type[BaseException], ...]:
    """The ``ClickException`` classes usage errors may come as.

    typer 0.29 vendors click as ``typer._click`` (its ``BadParameter`` derives from that copy's
    ``ClickException``); older typer releases use the installed ``click``. Both are caught, found through
    the public ``typer.BadParameter`` rather than a private module path. The installed click is looked up,
    not imported: a typer that uses it has imported it already, and one that vendors it never raises its
    errors (importing it would only lengthen every command's start).
    """
    types = [c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"]
    click = sys.modules.get("click")
    if click is not None:
        types.append(click.exceptions.ClickException)
    return tuple(dict.fromkeys(types))


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; errors become one message on stderr and an exit code (see the module docstring)."""
    # When the process ends, Python's shutdown runs full passes of the cyclic garbage collector over every
    # object left, pandas' and XGBoost's imports included, only for the memory to go back to the system
    # anyway: 0.3 s after a ``recommend`` had printed (a busy 2-core VM). Frozen objects are skipped.
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)
    usage_errors = _click_exception_types()
    from sharewise.predictor import xgboost_import  # light: XGBoost itself loads on first use

    xgboost_import.LEAN_XGBOOST_IMPORT = True
    try:
        app(args=argv, standalone_mode=False, prog_name="sharewise")
    except SharewiseError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        typer.echo("interrupted; finished measurements are saved, rerun the same command to resume", err=True)
        sys.exit(130)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(1)
    except usage_errors as exc:
        exc.show()
        sys.exit(2)
