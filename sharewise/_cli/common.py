"""Helpers shared by the CLI command modules: the console and JSON output."""

from __future__ import annotations

import json
import math

from rich.console import Console

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


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
