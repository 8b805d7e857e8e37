"""Per-GPU, per-class performance variability (PAL's measured slowdown factors): the value type and its readers.

PAL (Jain et al., SC'24) measured the same application on hundreds of V100s and found each GPU's speed to vary
by application class. A GPU's **factor** for a class is its run time over the median GPU's (1.0 = median, 1.2 =
20% slower); a job runs at the largest factor among its GPUs for its class. Three sources:

- **a measurements file per class**, from which factors are drawn as PAL's artifact draws them: PAL's
  ``profiles.json`` maps each class (``classA`` .. ``classD``, listed most variability-sensitive first) to a CSV
  of repeated runs with a ``perf`` column (a time); a run's factor is its ``perf`` over the file's median, and
  each GPU gets, per class, one run drawn uniformly at random (with replacement) from ``numpy.random.
  Generator(seed)``, seed 42 as in the artifact, classes drawn one after the other in the listed order, so two
  classes reading the same file (PAL's B and C both read BERT's) get independent draws. The stream is numpy's
  PCG64 (``stream="pcg64"``): the same distribution and seed as the artifact, not necessarily the same GPUs;
  ``stream="mt19937"`` draws from ``numpy.random.RandomState(seed)`` instead, the legacy stream that
  ``np.random.seed(seed)`` starts (which stream the artifact's draw uses decides which GPUs come out bad).
- **a per-GPU table**: a CSV with one row per GPU and one column ``PerfVar_<class>`` per class (PAL's
  ``32gpu-variability.csv``); a cluster bigger than the table repeats it (GPU ``g`` gets row ``g mod rows``).
- **one measurements CSV** (a ``perf`` column): one class, named after the file, drawn as above.

Jobs map to classes by workload name: PAL's mapping (``sharewise.datasets.traces.pal.pal_class_mapping``) or a
mapping file (CSV ``workload,class``). With a single class every job belongs to it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from sharewise.errors import ConfigError, DatasetError

#: The seed PAL's artifact draws its per-GPU factors with.
PAL_SEED = 42
#: Random streams a draw may use: numpy's ``Generator`` (PCG64) or the legacy ``RandomState`` (MT19937).
STREAMS = ("pcg64", "mt19937")
_PREFIX = "PerfVar_"


@dataclass(frozen=True, eq=False)
class GpuVariability:
    """Slowdown factor of every GPU for every application class, and which class each workload belongs to.

    ``factors[c, g]`` is GPU ``g``'s factor for class ``classes[c]`` (> 0; 1.0 = the median GPU; larger is
    slower); ``classes`` are listed most variability-sensitive first (PAL's A..D); ``class_of`` maps workload
    names to class names. Example::

        GpuVariability(classes=("classA", "classB"), factors=array([[1.0, 1.3], [1.0, 1.02]]),
                       class_of={"resnet50": "classA", "bert": "classB"}, source="profiles.json, seed 42")
    """

    classes: tuple[str, ...]
    factors: np.ndarray
    class_of: Mapping[str, str] = field(default_factory=dict)
    source: str = ""

    def __post_init__(self) -> None:
        factors = np.array(self.factors, dtype=float, ndmin=2)
        if factors.shape[0] != len(self.classes) or factors.shape[1] < 1:
            raise ConfigError(
                f"variability: {len(self.classes)} class(es) need a factors array of shape "
                f"({len(self.classes)}, n_gpus), got {factors.shape}"
            )
        if len(set(self.classes)) != len(self.classes):
            raise ConfigError(f"variability: class names must be unique, got {list(self.classes)}")
        if not (np.isfinite(factors).all() and (factors > 0).all()):
            raise ConfigError("variability: every factor must be a positive finite number")
        unknown = sorted(set(self.class_of.values()) - set(self.classes))
        if unknown:
            raise ConfigError(
                f"variability: the class mapping names class(es) {unknown} that have no factors; known "
                f"classes: {', '.join(self.classes)}"
            )
        factors.flags.writeable = False
        object.__setattr__(self, "factors", factors)
        object.__setattr__(self, "class_of", dict(self.class_of))

    @property
    def n_gpus(self) -> int:
        return int(self.factors.shape[1])

    def speeds(self) -> np.ndarray:
        """Per class and GPU, the speed (1 / factor): the rate a job of that class makes on that GPU."""
        return 1.0 / self.factors

    def gpu_speed(self) -> np.ndarray:
        """One class-blind speed per GPU: the geometric mean over classes of its speeds."""
        return np.exp(-np.log(self.factors).mean(axis=0))

    def class_ids(self, workloads: Iterable[str]) -> np.ndarray:
        """Return the class index of each workload; ``ConfigError`` names the workloads no class covers."""
        names = [str(w) for w in workloads]
        if len(self.classes) == 1:
            return np.zeros(len(names), dtype=np.int64)
        index = {c: i for i, c in enumerate(self.classes)}
        ids = np.array([index.get(self.class_of.get(w, ""), -1) for w in names], dtype=np.int64)
        if (ids < 0).any():
            missing = sorted({w for w, i in zip(names, ids, strict=True) if i < 0})
            raise ConfigError(
                f"no variability class for workload(s) {missing}; map each workload to one of "
                f"{', '.join(self.classes)} with a class mapping file (--job-classes, CSV: workload,class)"
            )
        return ids

    def resized(self, n_gpus: int) -> GpuVariability:
        """The same classes on ``n_gpus`` GPUs: GPU ``g`` takes the factors of GPU ``g mod n_gpus`` here."""
        if n_gpus == self.n_gpus:
            return self
        cols = np.arange(n_gpus) % self.n_gpus
        return GpuVariability(self.classes, self.factors[:, cols], self.class_of, self.source)

    def uniform(self) -> GpuVariability:
        """The same classes and mapping with every factor 1.0 (the ablation without variability)."""
        return GpuVariability(self.classes, np.ones_like(self.factors), self.class_of, self.source + ", all 1.0")

    def with_classes(self, class_of: Mapping[str, str]) -> GpuVariability:
        """The same factors with workloads mapped to classes by ``class_of``."""
        return GpuVariability(self.classes, self.factors, class_of, self.source)


def draw_factors(
    measurements: Mapping[str, np.ndarray], n_gpus: int, seed: int = PAL_SEED, stream: str = "pcg64"
) -> np.ndarray:
    """Draw each GPU's factor per class from that class's measured times, as PAL's artifact does.

    Each class's times are divided by their median; GPU ``g`` gets, per class, the factor of one run drawn
    uniformly with replacement. One ``numpy.random.Generator(seed)`` (``stream="pcg64"``) or
    ``numpy.random.RandomState(seed)`` (``"mt19937"``) draws the classes in the given order.

    Example: ``draw_factors({"classA": np.array([100.0, 110.0, 300.0])}, 2)`` might give
    ``array([[1.1, 1.0]])`` (rows: classes, columns: GPUs).
    """
    if n_gpus < 1:
        raise ConfigError(f"need at least one GPU to draw factors for, got {n_gpus}")
    if stream not in STREAMS:
        raise ConfigError(f"random stream must be one of {list(STREAMS)}, got {stream!r}")
    rng = np.random.default_rng(seed) if stream == "pcg64" else np.random.RandomState(seed)
    draw = rng.integers if stream == "pcg64" else rng.randint
    out = np.empty((len(measurements), n_gpus))
    for c, times in enumerate(measurements.values()):
        times = np.asarray(times, dtype=float)
        out[c] = (times / np.median(times))[draw(0, times.shape[0], size=n_gpus)]
    return out


def read_variability(
    path: str | Path,
    n_gpus: int,
    *,
    seed: int = PAL_SEED,
    class_of: Mapping[str, str] | None = None,
    stream: str = "pcg64",
) -> GpuVariability:
    """Read per-GPU, per-class factors for ``n_gpus`` GPUs from ``path`` (module docstring: PAL's
    ``profiles.json``, a ``PerfVar_<class>`` table, or one measurements CSV, drawn with ``seed`` from
    ``stream``), workloads mapped by ``class_of``."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"variability file {str(path)!r} does not exist")
    if path.suffix.lower() == ".json":
        classes, files = _read_profiles_json(path)
        cache: dict[Path, np.ndarray] = {}
        measured = {c: cache.setdefault(f, _measured_times(f)) for c, f in zip(classes, files, strict=True)}
        factors = draw_factors(measured, n_gpus, seed, stream)
        source = f"{path.name}: drawn per GPU and class, seed {seed}" + ("" if stream == "pcg64" else f" ({stream})")
        return GpuVariability(tuple(classes), factors, class_of or {}, source)
    frame = _read_csv(path)
    columns = [c for c in frame.columns if str(c).startswith(_PREFIX)]
    if columns:
        values = frame[columns].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=float)
        bad = ~(np.isfinite(values) & (values > 0))
        if bad.any():
            row, col = (int(x[0]) for x in np.nonzero(bad))
            raise DatasetError(
                f"{path}:{row + 2}: column {columns[col]!r} must be a positive factor, got "
                f"{frame[columns[col]].iloc[row]!r}"
            )
        classes = tuple(str(c)[len(_PREFIX) :] for c in columns)
        table = GpuVariability(classes, values.T, class_of or {}, f"{path.name}: per-GPU table")
        return table.resized(n_gpus)
    if "perf" in frame.columns:
        factors = draw_factors({path.stem: _times(frame, path)}, n_gpus, seed, stream)
        return GpuVariability((path.stem,), factors, class_of or {}, f"{path.name}: drawn per GPU, seed {seed}")
    raise DatasetError(
        f"{path}: expected PAL's profiles.json, a per-GPU table with columns {_PREFIX}<class>, or measurements "
        f"with a 'perf' column; got columns {list(frame.columns)[:8]}"
    )


def read_class_mapping(path: str | Path) -> dict[str, str]:
    """Read a class mapping file: a CSV with columns ``workload,class`` (one workload a line).

    Example: a file ``workload,class`` / ``resnet50,classA`` gives ``{"resnet50": "classA"}``.
    """
    path = Path(path)
    frame = _read_csv(path)
    missing = [c for c in ("workload", "class") if c not in frame.columns]
    if missing:
        raise DatasetError(f"{path}: missing column(s) {missing}; expected a CSV with columns workload,class")
    workload = frame["workload"].astype(str).str.strip()
    cls = frame["class"].astype(str).str.strip()
    empty = (workload == "") | (cls == "")
    if empty.any():
        raise DatasetError(f"{path}:{int(np.argmax(empty.to_numpy())) + 2}: workload and class must both be given")
    dup = workload.duplicated()
    if dup.any():
        row = int(np.argmax(dup.to_numpy()))
        raise DatasetError(f"{path}:{row + 2}: workload {workload.iloc[row]!r} is mapped twice")
    return dict(zip(workload, cls, strict=True))


def _read_profiles_json(path: Path) -> tuple[list[str], list[Path]]:
    try:
        mapping = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatasetError(f"cannot read {str(path)!r} as JSON: {exc}") from None
    if not isinstance(mapping, dict) or not mapping or not all(isinstance(v, str) for v in mapping.values()):
        raise DatasetError(
            f"{path}: expected an object mapping each class to its measurements CSV, like PAL's profiles.json "
            '({"classA": "aggregated_data/sim/resnet-longhorn-agg.csv", ...})'
        )
    # Paths are relative to the JSON's folder (PAL's profiles.json sits at the root of its data).
    return list(mapping), [(path.parent / v).resolve() for v in mapping.values()]


def _measured_times(path: Path) -> np.ndarray:
    if not path.is_file():
        raise DatasetError(f"measurements file {str(path)!r} named in the class mapping does not exist")
    return _times(_read_csv(path), path)


def _times(frame: pd.DataFrame, path: Path) -> np.ndarray:
    if "perf" not in frame.columns:
        raise DatasetError(f"{path}: measurements need a 'perf' column (a run's time), got {list(frame.columns)[:8]}")
    times = pd.to_numeric(frame["perf"], errors="coerce").to_numpy(dtype=float)
    bad = ~(np.isfinite(times) & (times > 0))
    if bad.any():
        row = int(np.argmax(bad))
        raise DatasetError(f"{path}:{row + 2}: column 'perf' must be a positive time, got {frame['perf'].iloc[row]!r}")
    return times


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        frame = pd.read_csv(path)
    except FileNotFoundError:
        raise DatasetError(f"file {str(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise DatasetError(f"cannot read {str(path)!r} as CSV: {str(exc).splitlines()[0]}") from None
    if frame.empty:
        raise DatasetError(f"{path}: the file holds no rows")
    frame.columns = [str(c).strip() for c in frame.columns]
    return frame
