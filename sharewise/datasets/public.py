"""Find the public data: Gavel's throughputs and traces, the Philly trace, PAL's variability and traces.

The files sit in ``data/`` at the root of the source checkout, outside the installed package (``data/README.md``
gives each source's licence and provenance): a clone has them, an installed wheel does not. ``$SHAREWISE_DATA``
names another folder, e.g. a clone's ``data/`` for a sharewise installed from a wheel.
"""

from __future__ import annotations

import os
from pathlib import Path

from sharewise.errors import PublicDataNotFoundError

#: The environment variable naming the public data folder; it wins over the checkout's ``data/``.
ENV_VAR = "SHAREWISE_DATA"
#: The folder above the package: the root of a source checkout, or ``site-packages`` for an installed wheel.
CHECKOUT = Path(__file__).resolve().parents[2]
#: One subfolder per source.
SOURCES = ("gavel", "philly", "pal")


def public_data_root(root: str | os.PathLike | None = None) -> Path:
    """Return the folder of the public data, one subfolder per source (``gavel/``, ``philly/``, ``pal/``).

    Parameters
    ----------
    root : path, optional
        A folder given explicitly (a benchmark's ``--data-root``). It wins over ``$SHAREWISE_DATA``, which wins
        over the ``data/`` folder of the source checkout sharewise was imported from.

    Returns
    -------
    Path
        For a clone at ``~/sharewise``: ``Path("/home/me/sharewise/data")``, so that
        ``public_data_root() / "gavel" / "simulation_throughputs.json"`` is Gavel's throughputs.

    Raises
    ------
    PublicDataNotFoundError
        The folder chosen lacks a source's subfolder, or sharewise runs from an installed wheel (no checkout
        above the package) and ``$SHAREWISE_DATA`` is unset.
    """
    fix = (
        f"fix: run from a source checkout of sharewise (its data/ folder holds the files), set {ENV_VAR} "
        "to such a data/ folder, or pass the folder explicitly (--data-root)"
    )
    if root is not None:
        folder, how = Path(root).expanduser(), f"the folder given, {root}"
    elif os.environ.get(ENV_VAR):
        folder, how = Path(os.environ[ENV_VAR]).expanduser(), f"${ENV_VAR}={os.environ[ENV_VAR]}"
    elif (CHECKOUT / "pyproject.toml").is_file():
        folder, how = CHECKOUT / "data", f"the source checkout's {CHECKOUT / 'data'}"
    else:
        raise PublicDataNotFoundError(
            f"expected the public data in the data/ folder of a source checkout or in ${ENV_VAR}; got sharewise "
            f"installed at {CHECKOUT} (not a checkout) and {ENV_VAR} unset; {fix}"
        )
    missing = [name for name in SOURCES if not (folder / name).is_dir()]
    if missing:
        got = "no such folder" if not folder.is_dir() else f"no {', '.join(f'{m}/' for m in missing)} in it"
        raise PublicDataNotFoundError(
            f"expected the public data ({', '.join(f'{s}/' for s in SOURCES)}) in {how}; got {got}; {fix}"
        )
    return folder
