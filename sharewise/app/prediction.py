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
    #: The model's structure (``predictor.structure``), or ``auto``: chosen by grouped CV over ``calibrate_by``.
    structure: str = "auto"


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
    _check_structure(options.structure)
    profiles, pairs = read_datasets(list(options.data))
    model = train_model(
        profiles,
        pairs,
        features=options.features,
        partner_effect=options.partner_effect,
        structure=options.structure,
        group_by=options.calibrate_by or "family",
        sources=_sources(options.data),
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
    #: Each fold's structure: ``auto`` (nested grouped CV on the fold's training rows) or a fixed one.
    structure: str = "auto"


@dataclass
class EvaluateResult:
    """The evaluation summary (``sharewise.predictor.evaluation.summarize``) and the figures written."""

    summary: dict
    figures: list[Path] = field(default_factory=list)
    #: One line per device gap: profiles on a device where no pair is measured (``unscored_device_note``).
    notes: list[str] = field(default_factory=list)


def evaluate(options: EvaluateOptions) -> EvaluateResult:
    """Grouped cross-validation of the model next to the baselines; optionally draw its figures.

    With ``budget`` K > 0 the summary also holds ``"budget": K``, ``"strategies"`` (each strategy's metrics
    when every held-out workload reveals K pairs, ``budget.evaluate_budget``) and ``"n_common"``; ``"model"``
    stays the model with nothing revealed, so ``budget=0`` is exactly the plain evaluation.
    """
    from sharewise.datasets import read_datasets
    from sharewise.predictor.evaluation import cross_validate_dataset, summarize

    _check_group_by(options.group_by, "--group-by")
    _check_structure(options.structure)
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
        structure=options.structure,
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
            structure=options.structure,
            random_state=options.seed,
        )[options.budget]
        summary = {"budget": options.budget, **summary, **curve}
    # The card of the model ``train`` would write on the same data (its structure chosen on every row).
    from sharewise.predictor import train_model

    summary["card"] = train_model(
        profiles,
        pairs,
        features=options.features,
        partner_effect=options.partner_effect,
        structure=options.structure,
        group_by=options.group_by,
        sources=_sources(options.data),
        random_state=options.seed,
    ).card_
    from sharewise.app.suggest import profile_folder
    from sharewise.predictor.evaluation import unscored_device_note

    note = unscored_device_note(profiles, pairs, profile_folder(options.data, profiles))
    return EvaluateResult(summary=summary, figures=figures, notes=[note] if note else [])


def _sources(data: tuple[str, ...]) -> dict[str, int]:
    """Ordered rows (two per measured pair) each dataset folder brings, for the model card."""
    from sharewise.datasets.store import open_dataset

    out = {}
    for path in data:
        pairs = open_dataset(path, profiles=False).read_pairs()
        ok = pairs[pairs["status"] == "ok"] if "status" in pairs.columns else pairs
        out[str(path)] = 2 * len(ok)
    return out


def _check_structure(value: str) -> None:
    from sharewise.predictor.choices import STRUCTURE_CHOICES

    if value not in STRUCTURE_CHOICES:
        raise ConfigError(f"--structure must be one of {', '.join(STRUCTURE_CHOICES)}, got {value!r}")


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
    #: The sharing knob's split, e.g. ``"70:30"`` (``profiler.knob.Split``): job a's share; None: no knob.
    split: str | None = None


def predict(options: PredictOptions) -> list[dict]:
    """Predict both slowdowns of the pair on each device both are profiled on (or ``device``), with why.

    Where the two are profiled on different devices (a workload profiled here next to a shipped one), the
    prediction is made on a device one of them is profiled on, the other's profile from a device of the same
    kind standing in (``sharewise.predictor.stand_in``): on ``device`` where given, else on this machine's
    device where it is one of them, else on each such device. Each such prediction lists its ``stand_ins``
    and its ``note`` says so in one line, with the command that profiles the other workload there. Where no
    profile can stand in (the two are profiled on different kinds of device), a ``DatasetError`` says which
    command profiles the other one.

    Returns one ``explain_pair`` dict per device, plus ``"stand_ins"`` (empty, or e.g. ``[{"workload":
    "resnet18", "device_name": "Intel(R) Xeon(R) Processor (2 cores)", "source": "AMD EPYC (2 cores)"}]``),
    e.g. ``[{"device_name": "cpu", "speed_sum": 1.4, "stand_ins": [], ...}]``.
    """
    from sharewise.command_spec import recorded_name
    from sharewise.datasets import read_datasets
    from sharewise.predictor import SlowdownRegressor
    from sharewise.predictor.api import common_devices, explain_pair

    model = SlowdownRegressor.load(options.model)
    split = None
    if options.split is not None:
        from sharewise.profiler.knob import Split

        split = float(Split.parse(options.split).percent_a)
    profiles, _ = read_datasets(list(options.data), pairs=False)
    a, b = recorded_name(options.workload_a), recorded_name(options.workload_b)
    common = common_devices(profiles, a, b)  # fails on a workload without any profile
    devices = [options.device] if options.device and options.device in common else common
    stand_ins: dict[str, list] = {}
    if (options.device and options.device not in common) or not common:
        devices, profiles, stand_ins = _stand_in_devices(model, profiles, a, b, options)
    results = [explain_pair(model, profiles, a, b, d, top=options.top, split=split) for d in devices]
    for r in results:
        mine = stand_ins.get(r["device_name"], [])
        r["stand_ins"] = [s.to_dict() for s in mine]
        if mine:
            r["note"] = _stand_in_line(model, profiles, mine, [a, b], options.data)
    return results


def _stand_in_devices(model, profiles, a: str, b: str, options: PredictOptions):
    """The devices to predict ``a`` next to ``b`` on where no device has both profiles, the profiles with the
    stand-ins added, and the stand-ins per device (``predict``'s rule)."""
    from sharewise.predictor.stand_in import missing_note, profile_command, profiled_devices, with_stand_ins
    from sharewise.profiler.device import local_device_names

    trained = (model.training_summary_ or {}).get("devices", [])
    devices = profiled_devices(profiles)
    wanted = [(b, d) for d in sorted(devices[a] - devices[b])] + [(a, d) for d in sorted(devices[b] - devices[a])]
    if options.device:
        if options.device not in devices[a] | devices[b]:
            raise DatasetError(
                f"neither {a!r} nor {b!r} is profiled on {options.device!r} (they are on "
                f"{sorted(devices[a] | devices[b])}); profile them there first, or leave out --device"
            )
        wanted = [(w, d) for w, d in wanted if d == options.device]
    with_them, stand_ins = with_stand_ins(profiles, wanted, prefer=trained)
    by_device: dict[str, list] = {}
    for s in stand_ins:
        by_device.setdefault(s.device_name, []).append(s)
    if not by_device:
        here = next((d for d in local_device_names() if d in devices[a] | devices[b]), None)
        device = options.device or here or sorted(devices[a])[0]
        mine, other = (a, b) if device in devices[a] else (b, a)
        out = _profile_folder(options.data, profiles, device)
        raise DatasetError(
            missing_note([mine], device, {other: devices[other]}, profile_command(profiles, [other], device, out))
        )
    local = [d for d in local_device_names() if d in by_device]
    chosen = [options.device] if options.device else (local[:1] or sorted(by_device))
    return chosen, with_them, by_device


def _stand_in_line(model, profiles, stand_ins, pair, data) -> str:
    from sharewise.predictor.stand_in import profile_command, stand_in_note

    device = stand_ins[0].device_name
    out = _profile_folder(data, profiles, device)
    command = profile_command(profiles, [s.workload for s in stand_ins], device, out)
    subjects = [w for w in pair if w not in {s.workload for s in stand_ins}]
    trained = (model.training_summary_ or {}).get("devices", [])
    return stand_in_note(stand_ins, subjects, command, trained)


def _profile_folder(data, profiles, device: str) -> str:
    from sharewise.app.suggest import profile_folder

    return profile_folder(data, profiles, device)
