"""Application functions of the predictor commands: ``train``, ``evaluate``, ``predict`` (``suggest``: suggest.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sharewise.errors import ConfigError, DatasetError


@dataclass(frozen=True)
class TrainOptions:
    """``sharewise train``: datasets to train on, the model file, and the feature pipeline."""

    data: tuple[str, ...]
    out: Path
    seed: int = 0
    features: str = "physical"
    partner_effect: bool = True
    #: Held-out unit of the conformal calibration of p10/p90 (``calibrate_model``); None skips it.
    calibrate_by: str | None = "family"


@dataclass
class TrainResult:
    """The fitted model, where it and its sidecar were written, and what it was trained on."""

    model: object
    out: Path
    sidecar: Path
    summary: dict


def train(options: TrainOptions) -> TrainResult:
    """Train the slowdown model on every measured pair of the datasets, calibrate its intervals by grouped
    out-of-fold residuals (``calibrate_by``), and save it (model + sidecar, the calibration in the sidecar)."""
    from sharewise.datasets import read_datasets
    from sharewise.predictor import calibrate_model, train_model

    _check_group_by(options.calibrate_by, "--calibrate-by", allow_none=True)
    profiles, pairs = read_datasets(list(options.data))
    model = train_model(
        profiles,
        pairs,
        features=options.features,
        partner_effect=options.partner_effect,
        random_state=options.seed,
    )
    if options.calibrate_by is not None:
        calibrate_model(model, profiles, pairs, group_by=options.calibrate_by)
    sidecar = model.save(options.out)
    return TrainResult(model=model, out=Path(options.out), sidecar=sidecar, summary=model.training_summary_)


@dataclass(frozen=True)
class EvaluateOptions:
    """``sharewise evaluate``: datasets, the held-out unit, and the model settings of every fold."""

    data: tuple[str, ...]
    group_by: str = "workload"
    random_split: bool = False
    seed: int = 0
    features: str = "physical"
    partner_effect: bool = True
    tune: bool = False
    plot: Path | None = None
    #: Pair runs each held-out workload reveals (``budget.evaluate_budget``); 0 is the plain evaluation.
    budget: int = 0


@dataclass
class EvaluateResult:
    """The evaluation summary (``sharewise.predictor.evaluation.summarize``) and the figures written."""

    summary: dict
    figures: list[Path] = field(default_factory=list)


def evaluate(options: EvaluateOptions) -> EvaluateResult:
    """Grouped cross-validation of the model next to the baselines; optionally draw its figures.

    With ``budget`` K > 0 the summary also holds ``"budget": K``, ``"strategies"`` (each strategy's metrics
    when every held-out workload reveals K pairs, ``budget.evaluate_budget``) and ``"n_common"``; ``"model"``
    stays the model with nothing revealed, so ``budget=0`` is exactly the plain evaluation.
    """
    from sharewise.datasets import read_datasets
    from sharewise.predictor.evaluation import cross_validate_dataset, summarize

    _check_group_by(options.group_by, "--group-by")
    if options.budget < 0:
        raise ConfigError(f"--budget must be a non-negative number of pair runs, got {options.budget}")
    if options.budget and options.tune:
        raise ConfigError("--tune and --budget do not combine (the budgeted folds use fixed parameters); drop one")
    profiles, pairs = read_datasets(list(options.data))
    cv = cross_validate_dataset(
        profiles,
        pairs,
        group_by=options.group_by,
        random_split=options.random_split,
        features=options.features,
        partner_effect=options.partner_effect,
        tune=options.tune,
        random_state=options.seed,
    )
    figures: list[Path] = []
    if options.plot is not None:
        from sharewise.predictor.plots import plot_evaluation

        figures = list(plot_evaluation(cv, options.plot))
    summary = summarize(cv)
    if options.budget:
        from sharewise.predictor.budget import evaluate_budget_dataset

        curve = evaluate_budget_dataset(
            profiles,
            pairs,
            group_by=options.group_by,
            budgets=(options.budget,),
            features=options.features,
            partner_effect=options.partner_effect,
            seed=options.seed,
            random_state=options.seed,
        )[options.budget]
        summary = {"budget": options.budget, **summary, **curve}
    return EvaluateResult(summary=summary, figures=figures)


def _check_group_by(value: str | None, option: str, allow_none: bool = False) -> None:
    from sharewise.predictor.choices import GROUP_BY

    if value is None and allow_none:
        return
    if value not in GROUP_BY:
        raise ConfigError(f"{option} must be one of {list(GROUP_BY)}, got {value!r}")


@dataclass(frozen=True)
class PredictOptions:
    """``sharewise predict``: a saved model, the datasets with both profiles, the pair, and the device."""

    model: Path
    data: tuple[str, ...]
    workload_a: str
    workload_b: str
    device: str | None = None
    top: int = 5


def predict(options: PredictOptions) -> list[dict]:
    """Predict both slowdowns of the pair on each device both are profiled on (or ``device``), with why.

    Returns one ``explain_pair`` dict per device, e.g. ``[{"device_name": "cpu", "speed_sum": 1.4, ...}]``.
    """
    from sharewise.command_spec import recorded_name
    from sharewise.datasets import read_datasets
    from sharewise.predictor import SlowdownRegressor
    from sharewise.predictor.api import common_devices, explain_pair

    model = SlowdownRegressor.load(options.model)
    profiles, _ = read_datasets(list(options.data), pairs=False)
    a, b = recorded_name(options.workload_a), recorded_name(options.workload_b)
    devices = [options.device] if options.device else common_devices(profiles, a, b)
    if not devices:
        raise DatasetError(f"{a!r} and {b!r} have no profile on a common device; profile both on the same device")
    return [explain_pair(model, profiles, a, b, d, top=options.top) for d in devices]
