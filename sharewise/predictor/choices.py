"""Names the predictor's options take (held-out units, feature sets, budget strategies), importable at CLI start-up.

Pure Python on purpose: the CLI builds its choices from these tuples, and importing this module must not pull
in numpy, scikit-learn or XGBoost (``sharewise show reference`` stays fast). The modules that act on a name
import it from here, so each list is written once.
"""

#: What a grouped cross-validation holds out (``folds.grouped_folds``).
GROUP_BY = ("workload", "family", "device")

#: Feature sets of ``PairFeaturizer``: "physical" leaves out the op-mix and batch-size columns (``select_base``).
FEATURE_SETS = ("physical", "all")

#: How a new workload picks the pairs it measures under a budget (``budget.STRATEGIES``), in report order.
BUDGET_STRATEGIES = ("active", "random", "reference", "matrix-completion")

#: Model structures, simplest first (``structure``: the probe offset, the sensitivity x pressure model, that
#: plus trees), and what ``train``/``evaluate --structure`` accept: one of them or ``auto`` (grouped CV).
STRUCTURES = ("offset", "structured", "linear", "trees")
STRUCTURE_CHOICES = ("auto", *STRUCTURES)

#: Budgets of the K-curve (``benchmarks/bench_budget.py``): pair runs per new workload.
K_CURVE = (0, 1, 2, 4, 8)


def plural(group_by: str) -> str:
    """Return the plural of a held-out unit for titles: ``family`` -> ``families``, ``device`` -> ``devices``."""
    return {"family": "families"}.get(group_by, f"{group_by}s")
