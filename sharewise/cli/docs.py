"""The CLI as one Click command, for the documentation site: ``docs/reference/cli.md`` renders ``command``
with mkdocs-click, so every command and option on that page comes from the Typer app itself."""

from __future__ import annotations

import typer

from sharewise.cli import app

#: The Click group behind ``sharewise`` (what ``main`` runs), with every command registered on ``app``.
command = typer.main.get_command(app)
