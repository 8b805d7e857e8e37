"""The one import of XGBoost: lean in the CLI (no scikit-learn), a named error where it is not installed."""

from __future__ import annotations

import sys

from sharewise.errors import MissingDependencyError

#: Set by the CLI, a short-lived process that only uses XGBoost's own Booster: import XGBoost without its
#: scikit-learn wrapper. ``import xgboost`` otherwise imports scikit-learn (most of SciPy), which costs a
#: command such as ``recommend`` more than its predictions do. Library users keep XGBoost's full import.
LEAN_XGBOOST_IMPORT = False


def xgboost_module():
    """Return the ``xgboost`` module (without its scikit-learn wrapper where ``LEAN_XGBOOST_IMPORT`` says so)."""
    try:
        if LEAN_XGBOOST_IMPORT and "xgboost" not in sys.modules and "sklearn" not in sys.modules:
            # A None entry makes ``import sklearn`` raise ImportError, which xgboost.compat handles by
            # leaving its scikit-learn wrapper out; sklearn imports normally again afterwards.
            sys.modules["sklearn"] = None
            try:
                import xgboost
            finally:
                del sys.modules["sklearn"]
        import xgboost
    except ImportError:  # pragma: no cover - depends on the install
        raise MissingDependencyError(
            "the predictor needs XGBoost; install it with \"pip install 'sharewise[cpu]'\" "
            "(or 'sharewise[gpu]')"
        ) from None
    return xgboost
