"""CLI of ``sharewise import FORMAT``: one subcommand per registered importer, generated from its declaration.

Each importer declares its input files (positional or ``--name``) and flags; the command's parameters are
built from that, so a new format needs no hand-written command. The subcommands are built when the ``import``
group is first asked for its commands (``sharewise import ...``, its help, the docs): an importer's module
loads pandas, which no other command should pay for at start.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import typer
from typer.core import TyperGroup

from sharewise.cli.common import console, err_console
from sharewise.datasets.importers import IMPORTERS, Importer


class _ImportGroup(TyperGroup):
    """The ``import`` group: its ``commands`` gain one subcommand per registered importer on first access."""

    @property
    def commands(self) -> dict:
        for name in IMPORTERS.names():
            if name not in self._commands:
                single = typer.Typer(rich_markup_mode=self.rich_markup_mode, add_completion=False)
                single.command(name)(_command(IMPORTERS.get(name)))
                self._commands[name] = typer.main.get_command(single)
        return self._commands

    @commands.setter
    def commands(self, value: dict) -> None:
        self._commands = value


import_app = typer.Typer(
    name="import",
    help="Import measurements from other sources into a dataset folder (profiles + pairs).",
    no_args_is_help=True,
    cls=_ImportGroup,
)


def _print_import(result) -> None:
    console.print(
        f"wrote {result.profiles} profiles and {result.pairs} pairs "
        f"({', '.join(f'{k} {v}' for k, v in sorted(result.status_counts.items())) or 'none'}) of "
        f"{len(result.workloads)} workloads on {', '.join(result.devices)} to {result.out}"
    )
    if result.static_features:
        sf = result.static_features
        console.print(
            f"static features: {sf.get('counted', 0)} configurations counted, {sf.get('missing', 0)} job types "
            "left without them"
        )
    for w in result.warnings:
        err_console.print(f"warning: {w}")


def _command(importer: Importer):
    """Build the typer callback of ``sharewise import <importer.name>`` from the importer's declaration."""
    names = [i.name for i in importer.inputs]

    def command(**kwargs) -> None:
        from sharewise.app.imports import import_data

        flags = frozenset(f.name for f in importer.flags if kwargs.get(f.name))
        inputs = {name: Path(kwargs[name]) for name in names}
        _print_import(import_data(importer.name, inputs, Path(kwargs["out"]), flags))

    params = []
    for inp in importer.inputs:
        default = (
            typer.Option(..., f"--{inp.name.replace('_', '-')}", help=inp.help)
            if inp.option
            else typer.Argument(..., help=inp.help)
        )
        params.append(inspect.Parameter(inp.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Path))
    params.append(
        inspect.Parameter(
            "out",
            inspect.Parameter.KEYWORD_ONLY,
            default=typer.Option(..., "--out", "-o", help="Dataset folder to write."),
            annotation=Path,
        )
    )
    for flag in importer.flags:
        params.append(
            inspect.Parameter(
                flag.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=typer.Option(False, f"--{flag.name.replace('_', '-')}", help=flag.help),
                annotation=bool,
            )
        )
    command.__signature__ = inspect.Signature(params)
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__doc__ = f"{importer.summary}\n\nExample: {importer.example}"
    command.__name__ = f"import_{importer.name}"
    return command


def register(app: typer.Typer) -> None:
    app.add_typer(import_app, name="import")
