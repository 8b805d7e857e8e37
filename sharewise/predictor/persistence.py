"""A saved model's two files: XGBoost JSON and the sidecar (written atomically, read with clear errors).

File handling only: what goes into the sidecar is the model's business (``SlowdownRegressor.save``/``load``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from sharewise.errors import ConfigError, ModelSchemaError

SIDECAR_SUFFIX = ".sidecar.json"

__all__ = [
    "SIDECAR_SUFFIX",
    "read_model_files",
    "sidecar_path",
    "write_model_files",
]


def sidecar_path(path: str | os.PathLike) -> Path:
    """Return the sidecar that goes with model file ``path``: ``model.json`` -> ``model.sidecar.json``."""
    path = Path(path)
    return path.with_name(path.stem + SIDECAR_SUFFIX)


def write_model_files(booster, payload: dict, path: str | os.PathLike) -> Path:
    """Write ``booster`` as XGBoost JSON at ``path`` and ``payload`` as its sidecar, each through a temporary
    file renamed into place; return the sidecar path.

    Raises
    ------
    ConfigError
        ``path`` does not end in ``.json``.
    """
    path = Path(path)
    if path.suffix != ".json":
        raise ConfigError(f"model path must end in .json (XGBoost JSON format), got {str(path)!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp-{path.name}")
    booster.save_model(str(tmp))
    side = sidecar_path(path)
    side_tmp = side.with_name(f".tmp-{side.name}")
    side_tmp.write_text(json.dumps(payload, indent=2, default=_json_default))
    os.replace(tmp, path)
    os.replace(side_tmp, side)
    return side


def read_model_files(path: str | os.PathLike, schema_version: int, xgb) -> tuple[Any, dict]:
    """Return ``(booster, sidecar dict)`` of the model saved at ``path``.

    Raises
    ------
    ModelSchemaError
        A missing file, a sidecar that is not JSON or of another ``schema_version``, or an unreadable booster.
    """
    path = Path(path)
    side = sidecar_path(path)
    if not path.is_file():
        raise ModelSchemaError(f"model file {str(path)!r} not found; train one with 'sharewise train DIR --out {path}'")
    if not side.is_file():
        raise ModelSchemaError(
            f"model sidecar {str(side)!r} not found; a sharewise model is two files, {path.name} and "
            f"{side.name}: copy both, or retrain"
        )
    try:
        meta = json.loads(side.read_text())
    except json.JSONDecodeError as exc:
        raise ModelSchemaError(f"{side}: not valid JSON ({exc}); retrain the model") from None
    version = meta.get("schema_version")
    if version != schema_version:
        raise ModelSchemaError(
            f"{side}: model schema version {version!r}, but this sharewise reads version "
            f"{schema_version}; retrain the model with this version ('sharewise train ...')"
        )
    booster = xgb.Booster()
    try:
        booster.load_model(str(path))
    except xgb.core.XGBoostError as exc:
        raise ModelSchemaError(f"{path}: not a readable XGBoost model ({str(exc).splitlines()[0]})") from None
    return booster, meta


def _json_default(obj: Any):
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return str(obj)
