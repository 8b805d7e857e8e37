"""Old import path of the pair features, kept for code that imports them from here.

The code lives in three modules along its seams: ``pair_features`` (feature names, feature sets, the pair
feature matrix, per-job rates), ``feature_state`` (device references and partner effects, the state a
``PairFeaturizer`` fits) and ``profile_join`` (pairs joined to their profiles, ordered rows). New code
imports from those, or uses ``PairFeaturizer``.
"""

from sharewise.predictor.feature_state import (
    PARTNER_EFFECT,
    device_reference,
    lookup_partner_effect,
    partner_effect_table,
    reference_matrix,
    rows_reference,
    training_partner_effect,
    with_reference,
)
from sharewise.predictor.featurizer import PairFeaturizer
from sharewise.predictor.pair_features import (
    CORE_COLUMNS,
    FEATURE_SETS,
    PAIR_PREFIX,
    PARTNER_PREFIX,
    SELF_PREFIX,
    SHARE_RATES,
    PairRows,
    base_columns,
    base_columns_of_model,
    job_flop_rate,
    job_rates,
    pair_feature_matrix,
    pair_feature_matrix_indexed,
    pair_feature_names,
    select_base,
)
from sharewise.predictor.profile_join import (
    ordered_rows,
    pair_indices,
    profile_index,
    profile_matrix,
    resolve_pairs,
)

__all__ = [
    "CORE_COLUMNS",
    "FEATURE_SETS",
    "PAIR_PREFIX",
    "PARTNER_EFFECT",
    "PARTNER_PREFIX",
    "SELF_PREFIX",
    "SHARE_RATES",
    "PairFeaturizer",
    "PairRows",
    "base_columns",
    "base_columns_of_model",
    "device_reference",
    "job_flop_rate",
    "job_rates",
    "lookup_partner_effect",
    "ordered_rows",
    "pair_feature_matrix",
    "pair_feature_matrix_indexed",
    "pair_feature_names",
    "pair_indices",
    "partner_effect_table",
    "profile_index",
    "profile_matrix",
    "reference_matrix",
    "resolve_pairs",
    "rows_reference",
    "select_base",
    "training_partner_effect",
    "with_reference",
]
