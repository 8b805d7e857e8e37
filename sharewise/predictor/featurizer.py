"""``PairFeaturizer``: a model's pair features and their fitted state, with scikit-learn's fit/transform contract."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from sharewise.errors import ConfigError, ModelSchemaError, NotFittedError
from sharewise.predictor.feature_state import (
    PARTNER_EFFECT,
    lookup_partner_effect,
    partner_effect_table,
    reference_matrix,
    rows_reference,
    training_partner_effect,
    with_reference,
)
from sharewise.predictor.pair_features import (
    PairRows,
    base_columns_of_model,
    job_rates,
    pair_feature_matrix_indexed,
    pair_feature_names,
    select_base,
)
from sharewise.predictor.params import Params
from sharewise.predictor.profile_join import ordered_rows, profile_matrix
from sharewise.predictor.structure import (
    OFFSET_COLUMNS,
    SHARE_COLUMNS,
    apply_structure,
    fit_structure,
    precision_weights,
    share_columns,
)

#: Keys of ``PairFeaturizer.to_dict``: its parameters, then its fitted state.
STATE_KEYS = ("features", "partner_effect", "base_columns", "device_reference", "partner_effects", "structure")

#: Features that may only raise the predicted slowdown: the partner's load on the device.
MONOTONE_INCREASING = (
    "pair_partner_share_",
    "pair_partner_effect",
    "partner_f_busy_frac",
    "partner_f_nvml_sm_util_mean",
)


def monotone_signs(names: Sequence[str]) -> list[int]:
    """Return XGBoost monotone constraints for ``names``: 1 for ``MONOTONE_INCREASING`` features, else 0.

    Example: ``monotone_signs(["self_f_busy_frac", "partner_f_busy_frac"])`` is ``[0, 1]``.
    """
    return [1 if str(n).startswith(MONOTONE_INCREASING) else 0 for n in names]


class PairFeaturizer(Params):
    """Turn ordered pair rows into a model's features, with the feature state fitted on training rows.

    Three kinds of feature carry state learned from training rows: the device shares (a job's rate over the
    highest rate on its device in training, ``device_reference_``), the partner's measured effect on the
    selves it was paired with (``partner_effects_``), and the two offsets of the model's structure
    (``structure_``: the probe offset and the sensitivity x pressure model, ``predictor.structure``, fitted by
    weighted least squares with each row weighted by its measurement's precision). ``fit`` learns them from
    training rows; ``transform`` applies them to rows to predict. ``fit_transform`` returns the training rows'
    own features, where, as in scikit-learn's ``TargetEncoder``, the partner effect is cross-fitted: a
    training row's value leaves out the rows whose self is of its own self family, so it never sees its own
    label. ``fit_transform(rows)`` therefore differs from ``fit(rows).transform(rows)`` on purpose.

    Parameters
    ----------
    features : {"physical", "all"}
        Feature set: which profile columns the features are built from (``select_base``).
    partner_effect : bool
        Add ``PARTNER_EFFECT``, each partner's mean log slowdown of the selves measured next to it.

    Attributes
    ----------
    base_columns_ : list of str
        Profile columns the features are built from, e.g. ``["iter_time_ms", "f_busy_frac"]``.
    device_reference_ : dict
        Highest rate per device among the training selves, e.g. ``{"flop_rate": {"k80": 1.5e12},
        "bytes_rate": {...}, "launch_rate": {...}}``; a device it lacks takes the best of the rows at hand.
    partner_effects_ : dict or None
        ``{device: {workload: effect}}``, e.g. ``{"v100": {"A3C": 0.31}}``; None without ``partner_effect``.
    structure_ : dict or None
        ``structure.fit_structure``'s state (levels per device and mode, partner coefficients); None for a
        featurizer rebuilt from feature names alone (its offsets are then unknown: NaN).

    Examples
    --------
    >>> featurizer = PairFeaturizer(features="physical", partner_effect=True)
    >>> X_train = featurizer.fit_transform(train_rows)  # doctest: +SKIP
    >>> X_new = featurizer.transform(new_rows)  # doctest: +SKIP
    """

    def __init__(self, features: str = "physical", partner_effect: bool = True) -> None:
        self.features = features
        self.partner_effect = partner_effect

    # ---- fitting -------------------------------------------------------------------------------------
    def fit(self, rows: PairRows) -> PairFeaturizer:
        """Learn the feature state from training rows ``rows`` (``ordered_rows``); return ``self``.

        Raises
        ------
        ConfigError
            An unknown feature set, or ``partner_effect`` on rows without measured slowdowns.
        """
        self.fit_transform(rows)
        return self

    def fit_transform(self, rows: PairRows) -> pd.DataFrame:
        """Fit on training rows ``rows`` and return their features (partner effect cross-fitted, see above)."""
        if rows.y is None:
            raise ConfigError("the featurizer is fitted on training rows: they need measured slowdowns")
        base = select_base(base_columns_of_model(rows.X.columns), self.features)
        self.base_columns_ = base
        self.device_reference_ = rows_reference(rows)
        self.partner_effects_ = partner_effect_table(rows) if self.partner_effect else None
        self.structure_ = None
        X = self._shared(rows)
        if self.partner_effects_ is not None:
            X = X.assign(**{PARTNER_EFFECT: training_partner_effect(rows).astype(np.float32)})
        X = self._with_shares(X, rows.meta)
        self.structure_ = fit_structure(X, rows.y, rows.meta, row_weights(rows.meta))
        return self._with_offsets(X, rows.meta)

    # ---- transforming --------------------------------------------------------------------------------
    def transform(self, rows: PairRows) -> pd.DataFrame:
        """Return the features of rows to predict: a float32 frame, columns ``get_feature_names_out()``.

        The share features are recomputed against ``device_reference_`` from the ``self_*`` and
        ``partner_*`` columns of ``rows.X``; the row labels of ``rows.X`` are kept. Example::

            self_iter_time_ms  ...  pair_sum_share_flop_rate  pair_same_workload  pair_partner_effect
            41.5               ...  1.37                      0.0                 0.31
        """
        self._check_fitted()
        X = self._with_shares(self._with_effect(self._shared(rows), rows.meta), rows.meta)
        return self._with_offsets(X, rows.meta)

    def featurize_pairs(self, profiles: pd.DataFrame, pairs: pd.DataFrame, with_target: bool = False) -> PairRows:
        """Join ``pairs`` to ``profiles`` (``ordered_rows``) and return the rows with this featurizer's features.

        ``rows.X`` equals ``transform`` of the joined rows and goes straight into the model's ``predict``.
        """
        self._check_fitted()
        rows = ordered_rows(
            profiles, pairs, base=self.base_columns_, with_target=with_target, reference=self.device_reference_
        )
        X = self._with_offsets(self._with_shares(self._with_effect(rows.X, rows.meta), rows.meta), rows.meta)
        return PairRows(X=X, y=rows.y, meta=rows.meta)

    def transform_indexed(
        self, profiles: pd.DataFrame, i_self: np.ndarray, i_partner: np.ndarray, share: float | None = None
    ) -> np.ndarray:
        """Return the float32 features of the ordered rows (self ``i_self[k]``, partner ``i_partner[k]``).

        ``i_self`` and ``i_partner`` are positions in ``profiles``; ``share`` is self's share of the device under
        the sharing knob, the same for every row (None: no knob). Per-job quantities are computed once per
        profile row and gathered (``pair_feature_matrix_indexed``), so a million rows among a few hundred
        profiles cost one gather per column: the path of batch prediction. Columns as
        ``get_feature_names_out()``.

        Raises
        ------
        ModelSchemaError
            ``profiles`` lack a column of ``base_columns_``.
        """
        self._check_fitted()
        base = self.base_columns_
        matrix = profile_matrix(profiles, base)
        devices = profiles["device_name"].astype(str).to_numpy(dtype=object)
        # A device the model never saw takes the best rate among all the profiles at hand.
        reference = reference_matrix(self.device_reference_, devices, job_rates(matrix, base))
        effect = None
        if self.partner_effects_ is not None:
            partners = pd.DataFrame({"device_name": devices, "partner_workload": profiles["workload"]})
            effect = lookup_partner_effect(self.partner_effects_, partners)
        X = pair_feature_matrix_indexed(matrix, i_self, i_partner, base, reference, effect)
        # The offsets read a few columns and each row's level; built once per row from the gathered matrix.
        names = list(self.get_feature_names_out())
        modes = (
            profiles["mode"].astype(str).to_numpy(dtype=object) if "mode" in profiles else np.full(len(devices), "")
        )
        meta = pd.DataFrame({"device_name": devices[i_self], "mode": modes[i_self]})
        meta["self_share"] = np.nan if share is None else float(share)
        inner = names[: -len(OFFSET_COLUMNS) - len(SHARE_COLUMNS)]
        frame = pd.DataFrame(X[:, : len(inner)], columns=inner, copy=False)
        shares = share_columns(frame, meta["self_share"].to_numpy())
        frame = frame.assign(**{name: shares[:, i] for i, name in enumerate(SHARE_COLUMNS)})
        offsets = self._offsets(frame, meta)
        return np.ascontiguousarray(np.column_stack([X, shares, offsets]), dtype=np.float32)

    def get_feature_names_out(self) -> np.ndarray:
        """Return the feature names ``transform`` produces, in column order."""
        self._check_fitted()
        names = pair_feature_names(self.base_columns_)
        if self.partner_effects_ is not None:
            names.append(PARTNER_EFFECT)
        names.extend(SHARE_COLUMNS)
        names.extend(OFFSET_COLUMNS)
        return np.asarray(names, dtype=object)

    def _shared(self, rows: PairRows) -> pd.DataFrame:
        # Every feature but the partner effect: those of the rows, shares rescaled to the fitted references.
        names = pair_feature_names(self.base_columns_)
        missing = [n for n in names if n not in rows.X.columns]
        if missing:
            raise ModelSchemaError(
                f"the rows lack feature column(s) {missing[:10]} that the featurizer was fitted with; build "
                "them from profiles with the same f_* columns (ordered_rows), or refit on these rows"
            )
        return with_reference(rows, self.device_reference_).X[names]

    def _with_effect(self, X: pd.DataFrame, meta: pd.DataFrame) -> pd.DataFrame:
        # Rows to predict read the partner effect from the table fitted on every training row.
        if self.partner_effects_ is None:
            return X
        effect = lookup_partner_effect(self.partner_effects_, meta).astype(np.float32)
        return X.assign(**{PARTNER_EFFECT: effect})

    def _offsets(self, X: pd.DataFrame, meta: pd.DataFrame) -> np.ndarray:
        # Slowdowns (the model takes their log); NaN for a featurizer without a fitted structure.
        if self.structure_ is None:
            return np.full((len(X), len(OFFSET_COLUMNS)), np.nan)
        return np.exp(np.column_stack(apply_structure(self.structure_, X, meta)))

    def _with_shares(self, X: pd.DataFrame, meta: pd.DataFrame) -> pd.DataFrame:
        share = meta["self_share"].to_numpy(dtype=np.float64) if "self_share" in meta else np.full(len(X), np.nan)
        values = share_columns(X, share).astype(np.float32)
        return X.assign(**{name: values[:, i] for i, name in enumerate(SHARE_COLUMNS)})

    def _with_offsets(self, X: pd.DataFrame, meta: pd.DataFrame) -> pd.DataFrame:
        offsets = self._offsets(X, meta).astype(np.float32)
        return X.assign(**{name: offsets[:, i] for i, name in enumerate(OFFSET_COLUMNS)})

    def _check_fitted(self) -> None:
        if not hasattr(self, "base_columns_"):
            raise NotFittedError(
                f"this {type(self).__name__} is not fitted yet; call fit(rows) on training rows first, or "
                "use the featurizer of a fitted model (model.featurizer_)"
            )

    # ---- persistence ---------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """Return parameters and fitted state as plain JSON types.

        Example: ``{"features": "physical", "partner_effect": True, "base_columns": ["iter_time_ms", ...],
        "device_reference": {"flop_rate": {"k80": 1.5e12}, ...}, "partner_effects": {"k80": {"A3C": 0.31}}}``.
        """
        self._check_fitted()
        effects = self.partner_effects_
        return {
            "features": str(self.features),
            "partner_effect": bool(self.partner_effect),
            "base_columns": [str(c) for c in self.base_columns_],
            "device_reference": _nested_floats(self.device_reference_),
            "partner_effects": None if effects is None else _nested_floats(effects),
            "structure": self.structure_,
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> PairFeaturizer:
        """Rebuild a fitted featurizer from ``to_dict``'s output.

        Raises
        ------
        ModelSchemaError
            ``data`` is not a mapping with every key of ``STATE_KEYS``.
        """
        missing = [k for k in STATE_KEYS if k not in data] if isinstance(data, Mapping) else list(STATE_KEYS)
        if missing:
            got = sorted(data) if isinstance(data, Mapping) else type(data).__name__
            raise ModelSchemaError(
                f"featurizer state must hold the keys {list(STATE_KEYS)}, got {got} (missing {missing}); "
                "it was not written by PairFeaturizer.to_dict: retrain the model ('sharewise train ...')"
            )
        out = cls(features=data["features"], partner_effect=bool(data["partner_effect"]))
        out.base_columns_ = [str(c) for c in data["base_columns"]]
        out.device_reference_ = _nested_floats(data["device_reference"])
        effects = data["partner_effects"]
        out.partner_effects_ = None if effects is None else _nested_floats(effects)
        out.structure_ = data["structure"]
        return out

    @classmethod
    def from_feature_names(cls, names: Sequence[str]) -> PairFeaturizer:
        """Return a featurizer without fitted state that rebuilds the features ``names``.

        For a model fitted on a bare feature frame: shares are taken against the best rate among the profiles
        at hand, and the partner effect (when ``names`` end with it) is unknown (NaN).
        """
        names = [str(n) for n in names if str(n) not in OFFSET_COLUMNS and str(n) not in SHARE_COLUMNS]
        uses_effect = bool(names) and names[-1] == PARTNER_EFFECT
        out = cls(features="all", partner_effect=uses_effect)
        out.base_columns_ = base_columns_of_model(names)
        out.device_reference_ = {}
        out.partner_effects_ = {} if uses_effect else None
        out.structure_ = None
        return out


def row_weights(meta: pd.DataFrame) -> np.ndarray:
    """Each training row's weight from its measurement's precision (``structure.precision_weights`` of the
    ``halfwidth`` that ``ordered_rows`` puts in the rows' meta; 1 where unknown)."""
    if "halfwidth" not in meta:
        return np.ones(len(meta))
    return precision_weights(meta["halfwidth"].to_numpy(dtype=np.float64))


def _nested_floats(table: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    return {str(k): {str(n): float(v) for n, v in inner.items()} for k, inner in table.items()}
