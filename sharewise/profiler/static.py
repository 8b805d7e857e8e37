"""Static (device-independent) features of a workload configuration, counted on the meta device.

For job types that sharewise never ran (imported traces such as Gavel's): a registry workload, optionally
with fields of its size's config replaced, stands for the job's model; its FLOPs, parameter and activation
bytes and op counts come from one step on ``torch.device("meta")`` (shapes only: no memory, no compute).
Results live in the profiler's ``FeatureCache``, so a second import of the same configuration is instant.
"""

from __future__ import annotations

import ast
import dataclasses
import logging
import math
import re
from typing import Any

from sharewise.errors import SharewiseError
from sharewise.profiler.features import FEATURES_VERSION, FeatureCache

log = logging.getLogger(__name__)

_SPEC = re.compile(r"^(?P<workload>[^\[\]]+?)\s*(?:\[(?P<overrides>.*)\])?$")
# A comma starts a new override only when ``name=`` follows it, so values such as ``(3, 3)`` keep theirs.
_NEXT_OVERRIDE = re.compile(r",(?=\s*[A-Za-z_]\w*\s*=)")


class StaticCountError(SharewiseError, RuntimeError):
    """Static features of a workload configuration could not be counted (bad spec, build or count failed)."""


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """Split ``"workload[field=value,...]"`` into the workload spec and its config overrides.

    Values are Python literals where they parse as one (``ast.literal_eval``), strings otherwise.

    >>> parse_spec("lstm_lm[dim=200,dropout=0.2]")
    ('lstm_lm', {'dim': 200, 'dropout': 0.2})
    >>> parse_spec("resnet50")
    ('resnet50', {})
    """
    match = _SPEC.match(spec.strip()) if isinstance(spec, str) else None
    if match is None:
        raise StaticCountError(
            f"static spec must be 'workload' or 'workload[field=value,...]', got {spec!r}"
        )
    overrides: dict[str, Any] = {}
    text = match["overrides"]
    for item in _NEXT_OVERRIDE.split(text) if text and text.strip() else []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip().isidentifier():
            raise StaticCountError(f"static spec {spec!r}: override {item.strip()!r} is not 'field=value'")
        try:
            value = ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError):
            value = raw.strip()
        overrides[key.strip()] = value
    return match["workload"].strip(), overrides


def count_static(
    spec: str,
    batch_size: int | None = None,
    size: str = "full",
    *,
    cache: FeatureCache | None = None,
    use_cache: bool = True,
) -> tuple[dict[str, float], int]:
    """Count the static features of one step of a workload configuration on the meta device.

    Parameters
    ----------
    spec : str
        A workload spec (a registry name such as ``"lstm_lm"``, or ``file.py:Class``), optionally with
        overrides of its config fields: ``"lstm_lm[dim=200,dropout=0.2]"``. Overrides replace fields of
        the config dataclass of ``size`` (``workload.cfg``) before the build.
    batch_size : int, optional
        The batch size; the workload's own for ``size`` when None.
    size : str
        The workload's size knob; ``"full"`` is the published architecture.
    cache : FeatureCache, optional
        Where results are kept (the default cache, ``$SHAREWISE_CACHE_DIR/features``, when None).
    use_cache : bool
        Read and write the cache; False recomputes and stores nothing.

    Returns
    -------
    (dict, int)
        The ``f_*`` features except ``f_batch_size`` (non-finite values as NaN) and the batch size
        counted, for example ``({"f_flops_per_step": 1.6e10, "f_param_bytes": 2.6e7, ...,
        "f_opshare_other": 0.0}, 20)``.

    Raises
    ------
    StaticCountError
        The spec does not parse or name a workload, an override names no config field, torch is missing,
        or the build or count failed; the message says which.
    """
    workload_spec, overrides = parse_spec(spec)
    try:
        import torch

        from sharewise.profiler.flops import static_features
        from sharewise.profiler.workloads import load_workload_class
    except ImportError as exc:
        raise StaticCountError(f"the static feature counter is not available ({exc})") from exc
    try:
        workload = load_workload_class(workload_spec)(batch_size=batch_size, size=size)
    except (SharewiseError, ValueError) as exc:
        raise StaticCountError(f"static spec {spec!r}: {exc}") from exc
    if overrides:
        workload.cfg = _with_overrides(workload, overrides, spec)
    key = {
        "kind": "static",
        "workload": workload_spec,
        "spec": spec,
        "size": size,
        "batch_size": int(workload.batch_size),
        "device_name": "meta",
        "torch_version": torch.__version__,
        "features_version": FEATURES_VERSION,
    }
    store = (cache if cache is not None else FeatureCache()) if use_cache else None
    cached = store.get(key) if store is not None else None
    if cached is not None:
        return cached, int(workload.batch_size)
    try:
        workload.build(torch.device("meta"))
        try:
            raw = static_features(workload)
        finally:
            workload.close()
    except Exception as exc:  # a zoo or counter bug: the caller decides whether that blocks it
        raise StaticCountError(
            f"counting static features of {spec!r} failed ({type(exc).__name__}: {exc})"
        ) from exc
    features = {}
    for name, value in raw.items():
        if name.startswith("f_") and name != "f_batch_size":
            number = float(value)
            features[name] = number if math.isfinite(number) else math.nan
    if store is not None:
        if all(math.isfinite(v) for v in features.values()):
            store.put(key, features)
        else:  # the cache holds finite features only; a NaN is recounted next time
            log.info("static features of %s hold non-finite values; not cached", spec)
    return features, int(workload.batch_size)


def _with_overrides(workload: Any, overrides: dict[str, Any], spec: str) -> Any:
    cfg = getattr(workload, "cfg", None)
    if not dataclasses.is_dataclass(cfg):
        raise StaticCountError(
            f"static spec {spec!r}: workload {type(workload).__name__} has no config dataclass (cfg) to override"
        )
    known = {f.name for f in dataclasses.fields(cfg)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise StaticCountError(
            f"static spec {spec!r}: {type(cfg).__name__} has no field(s) {', '.join(unknown)}; "
            f"its fields: {', '.join(sorted(known))}"
        )
    return dataclasses.replace(cfg, **overrides)
