"""Command-line interface: parse options, call one library function, print; map library errors to exit 2."""

from __future__ import annotations

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

# Each module registers its commands on ``app`` through a ``register(app)`` function, so this file stays
# a thin table of contents and areas do not edit one another's commands.
COMMAND_MODULES = (
    "sharewise._cli.profiler",
    "sharewise._cli.predictor",
    "sharewise._cli.policy",
    "sharewise._cli.report",
)


def _register_all() -> None:
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # area not written yet
                continue
            raise
        module.register(app)


_register_all()


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; a ``SharewiseError`` becomes a one-line message on stderr and exit code 2."""
    try:
        app(args=argv, standalone_mode=False)
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
    except Exception as exc:  # click usage errors
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            sys.exit(2)
        raise
