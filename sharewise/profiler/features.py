"""Solo-profile features of one workload on one device, and their on-disk cache."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sharewise.errors import DeviceError, SchemaError
from sharewise.profiler.flops import StepCounts, count_step, static_features
from sharewise.profiler.memory import MemoryTracker
from sharewise.profiler.trace import collect_events, trace_features, window_seconds

if TYPE_CHECKING:
    from sharewise.profiler.workloads.base import Workload

log = logging.getLogger(__name__)

#: Bump when a feature's definition changes, so cached features computed the old way are not reused.
FEATURES_VERSION = 1
#: Profiled steps by default: enough for a stable kernel mix, few enough to keep the trace small.
DEFAULT_TRACE_STEPS = 5
#: On CUDA the timed, NVML-sampled stretch runs at least this long: NVML averages utilization over
#: 1/6 s to 1 s, so a shorter stretch yields one or two samples.
NVML_MIN_WINDOW_S = 1.0


def assert_finite(features: dict[str, Any], context: str) -> None:
    """Raise ``SchemaError`` unless every feature is named ``f_*`` and is a finite number.

    Parameters
    ----------
    features : dict
        Feature name -> value.
    context : str
        What the features belong to, for the message (``"workload 'mlp' on cpu"``).
    """
    for name, value in features.items():
        if not isinstance(name, str) or not name.startswith("f_"):
            raise SchemaError(f"{context}: feature names start with 'f_', got {name!r}")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SchemaError(
                f"{context}: feature {name!r} must be a float, got {type(value).__name__} {value!r}"
            )
        if not math.isfinite(value):
            raise SchemaError(
                f"{context}: feature {name!r} is {value!r}, expected a finite number; "
                "rerun the profile, and report a bug if it repeats"
            )


def _device_kind(device: Any) -> str:
    return getattr(device, "type", None) or str(device).split(":")[0]


def _default_factory(workload: Workload) -> Callable[[], Workload]:
    # The Workload contract makes __init__(batch_size, size) store parameters only, so a second instance
    # with the same knobs is the same workload.
    return lambda: type(workload)(batch_size=workload.batch_size, size=workload.size)


def _counts(
    workload: Workload,
    device: Any,
    counts_device: Any,
    workload_factory: Callable[[], Workload] | None,
) -> StepCounts:
    import torch

    target = torch.device(counts_device if counts_device is not None else "meta")
    if target == torch.device(device):
        # Same device: count on the caller's instance rather than holding a second copy in memory.
        return count_step(workload)
    factory = workload_factory or _default_factory(workload)
    other = None
    try:
        other = factory()
        other.build(target)
        # One uncounted step so the count is of a steady-state step (optimizer state already exists).
        return count_step(other, warmup_steps=1)
    except Exception as exc:  # meta lacks many ops (.item(), data-dependent shapes): count for real
        log.info(
            "counting %s on %s failed (%s: %s); counting on %s instead",
            workload.name, target, type(exc).__name__, exc, device,
        )
    finally:
        if other is not None:
            try:
                other.close()
            except Exception:  # a failed build may leave half-made state; closing is best effort
                pass
    return count_step(workload)


def _synchronize(device: Any) -> None:
    if _device_kind(device) == "cuda":
        import torch

        torch.cuda.synchronize(device)


def solo_features(
    workload: Workload,
    device: Any,
    *,
    trace_steps: int = DEFAULT_TRACE_STEPS,
    counts_device: Any = None,
    workload_factory: Callable[[], Workload] | None = None,
    nvml: bool = True,
) -> dict[str, float]:
    """Return all solo-profile features of a workload on a device.

    The caller passes ``workload`` built on ``device`` and warmed up (its first steps pay one-off costs:
    allocator growth, cuDNN autotuning, optimizer state). Three parts:

    1. Static counts (``static_features``) on ``counts_device``, ``"meta"`` by default, on a separate
       instance made by ``workload_factory`` (default: the same class with the same ``batch_size`` and
       ``size``) and warmed by one step. If that fails for any reason the counts are made on ``workload``
       itself, on ``device``.
    2. ``trace_steps`` timed steps (at least ``NVML_MIN_WINDOW_S`` seconds on CUDA) under
       ``MemoryTracker`` and, on CUDA, ``NvmlSampler`` (skipped when NVML is unavailable): memory and NVML
       features, ``f_step_time_ms`` and ``f_achieved_flop_rate`` (counted FLOPs per second).
    3. ``trace_steps`` steps under torch.profiler (``collect_events``, ``trace_features``).

    Parameters
    ----------
    workload : Workload
        Built on ``device`` and warmed up.
    device : str or torch.device
        ``"cpu"`` or a CUDA device.
    trace_steps : int
        Steps timed and profiled.
    counts_device : str or torch.device, optional
        Where to count FLOPs and ops; ``"meta"`` when None.
    workload_factory : callable, optional
        Returns a new, unbuilt instance of the workload for the counts.
    nvml : bool
        Sample NVML on CUDA devices.

    Returns
    -------
    dict
        Finite float features, for example ``{"f_flops_per_step": 96256.0, "f_param_bytes": 11048.0,
        ..., "f_step_time_ms": 0.9, "f_achieved_flop_rate": 1.1e8, "f_mem_rss_growth_bytes": 0.0,
        "f_kernels_per_step": 14.0, ..., "f_timeshare_other": 0.0}``.
    """
    import torch

    if not isinstance(trace_steps, int) or trace_steps < 1:
        raise ValueError(f"trace_steps must be a positive integer, got {trace_steps!r}")
    dev = torch.device(device)
    kind = dev.type
    if kind not in ("cpu", "cuda"):
        raise DeviceError(f"solo_features profiles 'cpu' or 'cuda' devices, got {str(dev)!r}")
    if workload.model is None:
        raise ValueError(
            f"workload {workload.name!r}: solo_features needs a built, warmed-up workload; "
            f"call build({str(dev)!r}) and run a few steps first"
        )

    counts = _counts(workload, dev, counts_device, workload_factory)
    features = static_features(workload, counts)

    tracker = MemoryTracker(dev)
    sampler = None
    if kind == "cuda" and nvml:
        from sharewise.profiler.nvml import NvmlSampler, nvml_index_for_cuda

        try:
            index = dev.index if dev.index is not None else torch.cuda.current_device()
            sampler = NvmlSampler(nvml_index_for_cuda(index))
            sampler.start()
        except DeviceError as exc:
            log.info("skipping NVML features: %s", exc)
            sampler = None
    _synchronize(dev)
    tracker.start()
    steps = 0
    t0 = time.perf_counter()
    try:
        while steps < trace_steps or (
            sampler is not None and time.perf_counter() - t0 < NVML_MIN_WINDOW_S
        ):
            workload.step()
            steps += 1
        _synchronize(dev)
        elapsed = time.perf_counter() - t0
    finally:
        memory = tracker.stop()
        nvml_features = sampler.stop() if sampler is not None else {}
    step_s = elapsed / steps
    features["f_step_time_ms"] = step_s * 1e3
    features["f_achieved_flop_rate"] = counts.flops / step_s if step_s > 0 else 0.0
    features.update(memory)
    features.update(nvml_features)

    events = collect_events(workload, trace_steps, dev)
    features.update(trace_features(events, window_seconds(events), trace_steps, kind))
    features = {k: float(v) for k, v in features.items()}
    assert_finite(features, f"workload {workload.name!r} on {dev}")
    return features


@dataclass(frozen=True)
class FeatureKey:
    """What a solo profile's features depend on: features are computed once per key.

    Example: ``FeatureKey(workload="mlp", spec="mlp", size="tiny", batch_size=8, device_name="NVIDIA H200",
    torch_version="2.13.0", features_version=1)``.
    """

    workload: str
    spec: str
    size: str
    batch_size: int
    device_name: str
    torch_version: str
    features_version: int = FEATURES_VERSION

    @classmethod
    def for_workload(cls, workload: Workload, spec: str, device_name: str) -> FeatureKey:
        """Build the key of a workload instance, its spec string and the device name."""
        import torch

        return cls(
            workload=workload.name or type(workload).__name__,
            spec=spec,
            size=workload.size,
            batch_size=int(workload.batch_size),
            device_name=device_name,
            torch_version=torch.__version__,
        )


def default_cache_root() -> Path:
    """``$SHAREWISE_CACHE_DIR/features`` when that variable is set, else ``~/.cache/sharewise/features``."""
    env = os.environ.get("SHAREWISE_CACHE_DIR")
    base = Path(env).expanduser() if env else Path.home() / ".cache" / "sharewise"
    return base / "features"


def _key_dict(key: FeatureKey | Mapping[str, Any]) -> dict[str, Any]:
    # A plain mapping (the CLI adds fields such as the sharing mode) is accepted as well as a FeatureKey;
    # either way the features version is part of the key, so a change of definitions invalidates the cache.
    if isinstance(key, FeatureKey):
        return asdict(key)
    if not isinstance(key, Mapping):
        raise TypeError(f"cache key must be a FeatureKey or a mapping, got {type(key).__name__}")
    missing = [f for f in ("workload", "batch_size") if f not in key]
    if missing:
        raise ValueError(f"cache key lacks {missing}; got fields {sorted(key)}")
    out = dict(key)
    out.setdefault("features_version", FEATURES_VERSION)
    # Round-trip through JSON so the in-memory key compares equal to the one read back from the file.
    return json.loads(json.dumps(out, sort_keys=True, default=str))


class FeatureCache:
    """JSON files of solo-profile features, one per key, written atomically.

    A key is a ``FeatureKey`` or a mapping with at least ``workload`` and ``batch_size`` (every field
    counts). A file holds ``{"key": {...}, "features": {...}}``; a read checks the stored key, so a
    corrupt or colliding file is a miss, never wrong features.

    Examples
    --------
    >>> cache = FeatureCache(tmp_path)                                   # doctest: +SKIP
    >>> feats = cache.get_or_compute(key, lambda: solo_features(w, "cpu"))  # doctest: +SKIP
    """

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root).expanduser() if root is not None else default_cache_root()

    def path(self, key: FeatureKey | Mapping[str, Any]) -> Path:
        """The file that holds ``key``'s features."""
        fields = _key_dict(key)
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(fields["workload"]))[:60] or "workload"
        digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()
        return self.root / f"{stem}-bs{fields['batch_size']}-{digest[:20]}.json"

    def get(self, key: FeatureKey | Mapping[str, Any]) -> dict[str, float] | None:
        """Return the cached features of ``key``, or None when absent or unreadable."""
        path = self.path(key)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable feature cache file %s: %s", path, exc)
            return None
        if not isinstance(data, dict) or data.get("key") != _key_dict(key):
            return None
        features = data.get("features")
        if not isinstance(features, dict):
            return None
        try:
            assert_finite(features, f"cache file {path}")
        except SchemaError as exc:
            log.warning("ignoring feature cache file %s: %s", path, exc)
            return None
        return {k: float(v) for k, v in features.items()}

    def put(self, key: FeatureKey | Mapping[str, Any], features: dict[str, float]) -> Path:
        """Write ``features`` for ``key`` (temp file, then ``os.replace``) and return the file's path."""
        fields = _key_dict(key)
        assert_finite(features, f"features for {fields['workload']!r}")
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.path(key)
        payload = json.dumps({"key": fields, "features": features}, sort_keys=True, indent=1)
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(payload)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        return path

    def get_or_compute(
        self, key: FeatureKey | Mapping[str, Any], compute: Callable[[], dict[str, float]]
    ) -> dict[str, float]:
        """Return the cached features of ``key``, computing and caching them on a miss."""
        cached = self.get(key)
        if cached is not None:
            return cached
        features = compute()
        self.put(key, features)
        return features
