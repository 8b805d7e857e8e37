"""Estimator parameters as scikit-learn's ``BaseEstimator`` defines them, without importing scikit-learn.

scikit-learn's estimator contract is what the predictor follows (``__init__`` stores parameters only,
``get_params``/``set_params``, ``sklearn.base.clone`` works, fitted state ends in ``_``). Importing
``sklearn.base`` loads most of SciPy, which costs a command that only predicts (``recommend``,
``predict``) more than the prediction itself, so the two methods ``clone`` relies on are written here.
"""

from __future__ import annotations

import inspect
from typing import Any


class Params:
    """``get_params``, ``set_params`` and a parameter ``repr``, with ``BaseEstimator``'s semantics."""

    @classmethod
    def _get_param_names(cls) -> list[str]:
        init = cls.__init__
        if init is object.__init__:
            return []
        params = inspect.signature(init).parameters.values()
        return sorted(p.name for p in params if p.name != "self" and p.kind != p.VAR_KEYWORD)

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Return the constructor parameters (with ``deep``, nested estimators' as ``name__param`` too)."""
        out: dict[str, Any] = {}
        for name in self._get_param_names():
            value = getattr(self, name)
            if deep and hasattr(value, "get_params") and not isinstance(value, type):
                out.update((f"{name}__{k}", v) for k, v in value.get_params().items())
            out[name] = value
        return out

    def set_params(self, **params: Any):
        """Set parameters and return ``self``; an unknown name raises ``ValueError`` listing the valid ones."""
        valid = self._get_param_names()
        for name, value in params.items():
            if name not in valid:
                raise ValueError(
                    f"Invalid parameter {name!r} for estimator {type(self).__name__}. Valid parameters are: "
                    f"{valid!r}."
                )
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        defaults = {
            p.name: p.default for p in inspect.signature(type(self).__init__).parameters.values() if p.name != "self"
        }
        shown = [f"{k}={v!r}" for k, v in self.get_params(deep=False).items() if defaults.get(k, object()) != v]
        return f"{type(self).__name__}({', '.join(shown)})"
