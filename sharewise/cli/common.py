"""Helpers shared by the CLI command modules: the console, JSON output, cells, and help from registries."""

from __future__ import annotations

import json
import math
import os
import sys

from rich.console import Console

# Piped or logged output (no terminal, no $COLUMNS) would get rich's 80 columns, which truncates the wider
# tables to ellipses; such output has no width limit to respect, so give it room.
LOG_WIDTH = 160


def _width(stream) -> int | None:
    return None if stream.isatty() or "COLUMNS" in os.environ else LOG_WIDTH


console = Console(highlight=False, width=_width(sys.stdout))
err_console = Console(stderr=True, highlight=False, width=_width(sys.stderr))


def print_json(obj) -> None:
    """Print ``obj`` as JSON on stdout (NaN becomes null so any JSON parser reads it)."""
    print(json.dumps(_clean(obj), indent=2, sort_keys=False))


def _clean(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalars
        return _clean(obj.item())
    return obj


def fmt(value, spec: str = ".3f", suffix: str = "") -> str:
    """Format a number for a table cell; ``-`` for None, NaN and infinities."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:{spec}}{suffix}"


def split_list(values: list[str] | None) -> list[str]:
    """Flatten repeated and comma-separated option values: ``["a,b", "c"]`` -> ``["a", "b", "c"]``."""
    out = []
    for v in values or []:
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return out


def one_of(text: str, names) -> str:
    """Help text ending in the allowed values, read from a registry or a tuple: ``"Mode: cpu | mps."``."""
    listed = names.choices() if hasattr(names, "choices") else " | ".join(names)
    return f"{text}: {listed}."
