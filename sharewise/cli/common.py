"""Helpers shared by the CLI command modules: the console, JSON output, cells, and help from registries."""

from __future__ import annotations

import functools
import gc
import json
import math
import os
import re
import sys

# Piped or logged output (no terminal, no $COLUMNS) would get rich's 80 columns, which truncates the wider
# tables to ellipses; such output has no width limit to respect, so give it room.
LOG_WIDTH = 160


def _width(stream) -> int | None:
    return None if stream.isatty() or "COLUMNS" in os.environ else LOG_WIDTH


class _Console:
    """A ``rich.console.Console`` made at its first use: rich is imported by the commands that draw, and a
    command that prints JSON (``recommend --json`` on 100,000 jobs) does without it."""

    def __init__(self, stderr: bool) -> None:
        self._stderr = stderr
        self._console = None

    def __getattr__(self, name: str):
        return getattr(self.real, name)

    @property
    def real(self):
        """The ``rich.console.Console`` itself (made now if not yet): what rich's own objects are given."""
        if self._console is None:
            from rich.console import Console

            stream = sys.stderr if self._stderr else sys.stdout
            self._console = Console(stderr=self._stderr, highlight=False, width=_width(stream))
        return self._console

    # Python looks dunder methods up on the type: rich's progress bar enters the console (``with console``).
    def __enter__(self):
        return self.real.__enter__()

    def __exit__(self, *exc):
        return self.real.__exit__(*exc)


console = _Console(stderr=False)
err_console = _Console(stderr=True)


# rich's renderables, imported where a command first draws one (see ``_Console``).
def Table(*args, **kwargs):  # noqa: N802 - stands for the class
    from rich.table import Table

    return Table(*args, **kwargs)


def Rule(*args, **kwargs):  # noqa: N802 - stands for the class
    from rich.rule import Rule

    return Rule(*args, **kwargs)


def escape(markup: str) -> str:
    from rich.markup import escape

    return escape(markup)


def collector_paused(command):
    """Run ``command`` (a command's function) with Python's cyclic garbage collector paused.

    For a command that imports pandas, XGBoost and SciPy and builds a large result in one short call
    (``recommend``): the collector's passes over what those imports create, ever older and larger as the
    call goes on, took 0.13-0.26 s of a recommendation of 100,000 jobs (a busy 2-core VM) and found nothing
    to free. Afterwards
    what the call left alive moves to the oldest generation unexamined (``freeze`` then ``unfreeze``), so
    switching the collector back on does not examine it all at once; a later full collection still does.
    Not for long commands (``run``, ``profile``): cycles they make would wait until they end.
    """

    @functools.wraps(command)
    def paused(*args, **kwargs):
        enabled = gc.isenabled()
        gc.disable()
        try:
            return command(*args, **kwargs)
        finally:
            gc.freeze()
            gc.unfreeze()
            if enabled:
                gc.enable()

    return paused


#: Above this many characters, JSON is printed compact (one line): a recommendation for 100,000 queued jobs is
#: 25 MB, which a person does not read and indentation only makes larger.
PRETTY_MAX_CHARS = 200_000


def _orjson():
    """orjson, or None where it is not installed: imported at the first JSON output, never at CLI start, so
    every command works on a machine with no orjson (a GPU image that cannot install packages), only slower
    on very large output."""
    try:
        import orjson
    except ImportError:
        return None
    return orjson


def print_json(obj) -> None:
    """Print ``obj`` as JSON on stdout (NaN and infinities become null so any JSON parser reads it; numpy
    scalars and arrays are numbers and lists).

    Indented for a person to read; compact (one line) when longer than ``PRETTY_MAX_CHARS``. orjson encodes
    (a tenth of the standard library's time on a 25 MB recommendation, which was a sixth of the CLI call);
    what it refuses (an integer beyond 64 bits, an object it does not know) goes through ``_clean`` and the
    standard library, as does everything where orjson is not installed.
    """
    fast = _orjson()
    if fast is not None:
        compact = fast.OPT_SERIALIZE_NUMPY | fast.OPT_NON_STR_KEYS
        try:
            raw = fast.dumps(obj, default=_scalar, option=compact)
            if len(raw) <= PRETTY_MAX_CHARS:  # small: encoded again, indented (cheap at this size)
                raw = fast.dumps(obj, default=_scalar, option=compact | fast.OPT_INDENT_2)
        except TypeError:  # orjson.JSONEncodeError is a TypeError
            pass
        else:
            _print_utf8(raw)
            return
    text = json.dumps(_clean(obj, [0]))
    if len(text) <= PRETTY_MAX_CHARS:
        text = json.dumps(_clean(obj, [0]), indent=2)
    print(text)


def _print_utf8(raw: bytes) -> None:
    """Print UTF-8 ``raw`` and a newline: as bytes where stdout writes UTF-8 to a byte stream unchanged (the 10 MB
    of a recommendation for 100,000 jobs need not be decoded to text to be encoded again), else as text."""
    out = sys.stdout
    buffer = getattr(out, "buffer", None)
    encoding = getattr(out, "encoding", None) or ""
    if buffer is None or os.linesep != "\n" or encoding.lower().replace("_", "-") not in ("utf-8", "utf8"):
        print(raw.decode())
        return
    out.flush()  # what was printed as text comes first
    data = memoryview(raw + b"\n")
    while data:  # an unbuffered stdout (python -u) is a raw file, which may take part of a write
        data = data[buffer.write(data) :]
    buffer.flush()


def _scalar(obj):
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalars
        return obj.item()
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def _clean(obj, count: list[int]):
    count[0] += 1
    if isinstance(obj, str):
        return obj
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _clean(v, count) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        if all(type(v) is str for v in obj):  # job ids by the thousand: nothing to clean
            count[0] += len(obj)
            return list(obj)
        return [_clean(v, count) for v in obj]
    if getattr(obj, "ndim", 0) and callable(getattr(obj, "tolist", None)):  # numpy arrays
        return _clean(obj.tolist(), count)
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalars
        return _clean(obj.item(), count)
    return obj


def fmt(value, spec: str = ".3f", suffix: str = "") -> str:
    """Format a number for a table cell; ``-`` for None, NaN and infinities."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:{spec}}{suffix}"


#: Where a command spec starts in a comma-separated list: a comma before ``[NAME=]cmd:``.
_COMMAND_START = re.compile(r"(?:^|,)(?=\s*(?:[^\s=:,]+=)?cmd:)")


def split_list(values: list[str] | None) -> list[str]:
    """Flatten repeated and comma-separated option values: ``["a,b", "c"]`` -> ``["a", "b", "c"]``.

    A command spec (``[NAME=]cmd:...``) may hold commas of its own: from the first command on, a value
    splits only before the next ``[NAME=]cmd:``, so ``"ncf,a=cmd:python a.py --x 1,2"`` gives ``["ncf",
    "a=cmd:python a.py --x 1,2"]``. Give each command its own option (``-w 'a=cmd:...' -w 'b=cmd:...'``)
    or put commands last.
    """
    out = []
    for v in values or []:
        parts = _COMMAND_START.split(v)
        out.extend(x.strip() for x in parts[0].split(",") if x.strip())
        out.extend(x.strip() for x in parts[1:] if x.strip())
    return out


def one_of(text: str, names) -> str:
    """Help text ending in the allowed values, read from a registry or a tuple: ``"Mode: cpu | mps."``."""
    listed = names.choices() if hasattr(names, "choices") else " | ".join(names)
    return f"{text}: {listed}."


def bound_cell(m: dict) -> str:
    """A run table's cell on the contract: ``"1/4 (25%)"`` bounded jobs over their bound, ``-`` for none."""
    if not m.get("bounded_jobs"):
        return "-"
    return f"{m['bound_violations']}/{m['bounded_jobs']} ({m['bound_violation_rate']:.0%})"
