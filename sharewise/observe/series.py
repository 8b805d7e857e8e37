"""The series observed jobs exported, read back on one time grid: from Prometheus's HTTP API or saved scrapes.

Every observed process is one ``JobSeries``: its labels (``exporter.LABELS``, plus ``instance`` and ``job``
where Prometheus added them), when its interpreter started, and, at each time of the grid, its step count and
the time its last step ended (NaN where it was not being scraped: not started, ended, or its target down).

- **Prometheus** (``read_prometheus``): ``/api/v1/query_range`` of ``sharewise_observed_steps_total``,
  ``..._last_step_seconds`` and ``..._started_seconds`` from ``start`` to ``end`` every ``step`` seconds (in
  pieces of at most ``MAX_POINTS`` points, below the server's limit of 11,000 a series). Prometheus evaluates
  every series at the same times, and ends a series at the first failed scrape after its process exits (a
  staleness marker), so a job is present from its first scrape to within one scrape interval of its end.
- **Saved scrapes** (``read_scrapes``): files of Prometheus text format, as ``curl http://HOST:PORT/metrics``
  prints it, any number of scrapes one after another, every sample line ending with its scrape time in
  milliseconds (the text format's optional timestamp)::

      sharewise_observed_steps_total{name="train",device_kind="cpu",device="0-1",...} 412.0 1764880000123

  They are put on a grid of ``step`` seconds from the first scrape to the last, each grid time taking a
  process's latest sample no older than ``1.5 x step`` (so a process scraped every ``step`` seconds with some
  jitter is present throughout, and absent soon after its last scrape).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from sharewise.errors import ConfigError, SchemaError
from sharewise.profiler.exporter import LABELS, LAST_STEP, STARTED, STEPS_SERIES

#: Points of one query_range request (Prometheus refuses more than 11,000 points per series).
MAX_POINTS = 10_000
#: A grid time takes a saved scrape's sample no older than this many grid steps.
SCRAPE_LOOKBACK_STEPS = 1.5
_RELATIVE = re.compile(r"^-(\d+(?:\.\d+)?)([smhd])$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


@dataclass
class JobSeries:
    """One observed process on the grid: ``labels``, per grid time ``steps`` and ``last`` (NaN: absent), and the
    unix time it ``started`` (NaN where its exporter did not say).

    Example: ``JobSeries({"name": "train", "device_kind": "cpu", "device": "0-1", "pid": "4242", ...},
    steps=array([nan, 12., 31.]), last=array([nan, 1.7648e9, 1.7648e9]))``.
    """

    labels: dict[str, str]
    steps: np.ndarray
    last: np.ndarray
    started: float = math.nan

    @property
    def name(self) -> str:
        return self.labels.get("name", "")

    def describe(self) -> str:
        """``train (pid 4242 on host1)``."""
        return f"{self.name} (pid {self.labels.get('pid', '?')} on {self.labels.get('host', '?')})"


@dataclass
class Observed:
    """The grid times (unix seconds, ascending, ``step`` apart) and every observed process on them."""

    times: np.ndarray
    step: float
    jobs: list[JobSeries]
    source: str

    def to_frame(self) -> pd.DataFrame:
        """The series in long form, one row per process and grid time it was present: ``time``, the labels,
        ``steps``, ``last_step`` (the queried series, as a CSV shows them)."""
        rows = []
        for job in self.jobs:
            for k in np.flatnonzero(np.isfinite(job.steps)):
                rows.append({"time": float(self.times[k]), **{c: job.labels.get(c, "") for c in LABELS},
                             "steps": float(job.steps[k]), "last_step": float(job.last[k])})
        return pd.DataFrame(rows, columns=["time", *LABELS, "steps", "last_step"])


def parse_time(text: str | float, now: float | None = None) -> float:
    """Return unix seconds for ``text``: unix seconds, ``now``, ``-15m`` (s, m, h, d before now) or ISO 8601.

    >>> parse_time("-2m", now=1000.0), parse_time("1700000000"), parse_time("1970-01-01T00:01:00Z")
    (880.0, 1700000000.0, 60.0)
    """
    now = time.time() if now is None else now
    value = str(text).strip()
    if value == "now":
        return now
    relative = _RELATIVE.match(value)
    if relative:
        return now - float(relative.group(1)) * _UNIT_S[relative.group(2)]
    try:
        return float(value)
    except ValueError:
        pass
    try:
        stamp = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(
            f"time {value!r} is not one sharewise reads; give unix seconds, 'now', a time before now such as "
            "'-15m' (s, m, h, d), or ISO 8601 such as 2026-12-04T22:40:00Z"
        ) from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=_dt.timezone.utc)
    return stamp.timestamp()


def iso_time(t: float) -> str:
    """A unix time as people read it, in UTC: ``iso_time(1796424000.0)`` is ``'2026-12-04T22:40:00Z'``."""
    stamp = _dt.datetime.fromtimestamp(t, _dt.timezone.utc)
    return stamp.isoformat(timespec="milliseconds" if t % 1 else "seconds").replace("+00:00", "Z")


def duration(seconds: float) -> str:
    """``duration(5400)`` is ``'1 h 30 min'``, ``duration(42.5)`` is ``'42.5 s'``."""
    seconds = abs(seconds)
    if seconds < 60:
        return f"{seconds:.3g} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h" + (f" {minutes} min" if minutes else "")
    return f"{hours / 24:.1f} days"


def _grid(start: float, end: float, step: float) -> np.ndarray:
    if not step > 0:
        raise ConfigError(f"--step must be positive seconds, got {step}")
    if not end > start:
        when = "the same time" if end == start else f"{duration(start - end)} after it"
        raise ConfigError(
            f"the time range is empty: --start {iso_time(start)} is not before --end {iso_time(end)} ({when}); "
            "give a start before the end, e.g. --start -1h --end now"
        )
    return start + step * np.arange(int(math.floor((end - start) / step + 1e-9)) + 1)


def _key(labels: dict[str, str]) -> tuple:
    return tuple(sorted((k, v) for k, v in labels.items() if k != "__name__"))


def _assemble(times: np.ndarray, samples: dict[str, dict[tuple, list[tuple[int, float]]]]) -> list[JobSeries]:
    """JobSeries from ``{series name: {label key: [(grid index, value)]}}`` of the two exported series."""
    steps, last, started = samples.get(STEPS_SERIES, {}), samples.get(LAST_STEP, {}), samples.get(STARTED, {})
    jobs = []
    for key in sorted(set(steps) & set(last)):
        arrays = []
        for points in (steps[key], last[key]):
            values = np.full(len(times), np.nan)
            for k, v in points:
                values[k] = v
            arrays.append(values)
        present = np.isfinite(arrays[0]) & np.isfinite(arrays[1])
        arrays = [np.where(present, a, np.nan) for a in arrays]
        if present.any():
            born = max((v for _, v in started.get(key, [])), default=math.nan)
            jobs.append(JobSeries(dict(key), arrays[0], arrays[1], born))
    return jobs


# ---- Prometheus --------------------------------------------------------------------------------------------
def read_prometheus(url: str, start: float, end: float, step: float = 1.0, timeout_s: float = 30.0) -> Observed:
    """Query a Prometheus server for the observed series from ``start`` to ``end`` (unix seconds) every ``step``.

    Raises ``ConfigError`` where the server cannot be reached or answers with an error (the message quotes it).
    """
    times = _grid(start, end, step)
    samples: dict[str, dict[tuple, list[tuple[int, float]]]] = {}
    for series in (STEPS_SERIES, LAST_STEP, STARTED):
        found = samples.setdefault(series, {})
        for first in range(0, len(times), MAX_POINTS):
            piece = times[first : first + MAX_POINTS]
            for result in query_range(url, series, float(piece[0]), float(piece[-1]), step, timeout_s):
                points = found.setdefault(_key(result["metric"]), [])
                for t, value in result["values"]:
                    points.append((int(round((float(t) - start) / step)), float(value)))
    return Observed(times, float(step), _assemble(times, samples), f"prometheus {url}")


def query_range(url: str, query: str, start: float, end: float, step: float, timeout_s: float = 30.0) -> list[dict]:
    """Return the ``result`` list of one ``/api/v1/query_range`` call (a range vector per series).

    Example: ``[{"metric": {"__name__": "sharewise_observed_steps_total", "name": "train", ...},
    "values": [[1764880000, "412"], [1764880001, "431"]]}]``.
    """
    params = urllib.parse.urlencode({"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"})
    address = f"{url.rstrip('/')}/api/v1/query_range?{params}"
    try:
        with urllib.request.urlopen(address, timeout=timeout_s) as response:
            status, kind, text = response.status, response.headers.get_content_type(), response.read()
    except urllib.error.HTTPError as exc:
        status, kind, text = exc.code, exc.headers.get_content_type(), exc.read()
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ConfigError(
            f"cannot reach Prometheus at {url} ({reason}); expected its base URL, e.g. http://127.0.0.1:9090"
        ) from None
    try:
        body = json.loads(text.decode(errors="replace"))
    except json.JSONDecodeError:
        body = None
    if not (isinstance(body, dict) and body.get("status") in ("success", "error")):  # some other server's page
        raise ConfigError(
            f"{url} is not a Prometheus server: {address.split('?')[0]} answered HTTP {status} with {kind}, not "
            "Prometheus's JSON; give the server's base URL, e.g. http://127.0.0.1:9090 (not a job's /metrics port)"
        )
    if body["status"] != "success":
        error = " ".join(str(body.get("error", "")).split())
        raise ConfigError(f"Prometheus at {url} refused {query!r} (HTTP {status}): {body.get('errorType')}: {error}")
    return list(body.get("data", {}).get("result", []))


# ---- saved scrapes -----------------------------------------------------------------------------------------
def read_scrapes(paths: Sequence[str | Path], step: float = 1.0) -> Observed:
    """Read saved text-format scrapes (module docstring) onto a grid of ``step`` seconds.

    Raises ``SchemaError`` for a file that is not Prometheus text format or has a sample without a timestamp.
    """
    raw: dict[str, dict[tuple, list[tuple[float, float]]]] = {}
    for path in paths:
        for name, labels, value, stamp in _samples(Path(path)):
            raw.setdefault(name, {}).setdefault(_key(labels), []).append((stamp, value))
    stamps = [t for series in raw.values() for points in series.values() for t, _ in points]
    if not stamps:
        raise SchemaError(
            f"no {STEPS_SERIES} or {LAST_STEP} samples in {', '.join(map(str, paths))}; expected scrapes of jobs "
            "run under `sharewise observe` (or with SHAREWISE_OBSERVE_PORT set)"
        )
    times = _grid(min(stamps), max(stamps) + step * 1e-6, step)
    lookback = SCRAPE_LOOKBACK_STEPS * step
    samples: dict[str, dict[tuple, list[tuple[int, float]]]] = {}
    for name, series in raw.items():
        for key, points in series.items():
            points.sort()
            t = np.array([p[0] for p in points])
            v = np.array([p[1] for p in points])
            at = np.searchsorted(t, times + 1e-9, side="right") - 1  # the latest sample at or before each time
            ok = (at >= 0) & (times - t[np.maximum(at, 0)] < lookback)
            samples.setdefault(name, {})[key] = [(int(k), float(v[at[k]])) for k in np.flatnonzero(ok)]
    return Observed(times, float(step), _assemble(times, samples), f"scrapes {', '.join(map(str, paths))}")


def _samples(path: Path) -> Iterable[tuple[str, dict[str, str], float, float]]:
    """``(series name, labels, value, unix time)`` of every observed sample of one saved-scrapes file."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = path.read_text()
    except OSError as exc:
        raise SchemaError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, IndexError) as exc:
        raise SchemaError(f"{path}: not Prometheus text format ({exc}); save scrapes as /metrics serves them") from None
    for family in families:
        for sample in family.samples:
            if sample.name not in (STEPS_SERIES, LAST_STEP, STARTED):
                continue
            if sample.timestamp is None:
                raise SchemaError(
                    f"{path}: sample {sample.name} has no timestamp; each sample line must end with its scrape "
                    "time in milliseconds (see `sharewise collect --help` for a command that saves them so)"
                )
            yield sample.name, dict(sample.labels), float(sample.value), float(sample.timestamp)
