"""CLI commands of the predictor: train, evaluate, predict, and ``import`` of other sources' data."""

from __future__ import annotations

import math
from pathlib import Path

import typer
from rich.table import Table

from sharewise._cli.common import console, err_console, print_json

DATA_DIRS = typer.Argument(..., help="Dataset folders (or the word 'reference' for the shipped dataset).")
FEATURES = typer.Option(
    "physical", "--features", help="Feature set: physical (no op-mix or batch-size columns) | all."
)
PARTNER_EFFECT = typer.Option(
    True,
    "--partner-effect/--no-partner-effect",
    help="Use each known partner's measured effect on the jobs it was paired with.",
)


def _fmt(value, spec: str = ".3f", suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:{spec}}{suffix}"


def train(
    data: list[str] = DATA_DIRS,
    out: Path = typer.Option(
        ..., "--out", "-o", help="Model file to write (.json); a .sidecar.json goes next to it."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of XGBoost's row and column sampling."),
    features: str = FEATURES,
    partner_effect: bool = PARTNER_EFFECT,
):
    """Train the slowdown model on every measured pair of the datasets.

    Example: sharewise train runs/cpu reference --out model.json
    """
    from sharewise.datasets import read_datasets
    from sharewise.predictor import train_model

    profiles, pairs = read_datasets(data)
    model = train_model(
        profiles, pairs, features=features, partner_effect=partner_effect, random_state=seed
    )
    sidecar = model.save(out)
    s = model.training_summary_
    console.print(
        f"trained on {s['rows']} ordered rows ({s['pairs']} pairs) of {len(s['workloads'])} workloads on "
        f"{', '.join(s['devices'])}; {model.n_features_in_} features"
    )
    console.print(f"wrote {out} and {sidecar}")


def evaluate(
    data: list[str] = DATA_DIRS,
    group_by: str = typer.Option(
        "workload",
        "--group-by",
        "-g",
        help="Held-out unit: workload | family | device (never seen in training).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
    plot: Path = typer.Option(
        None, "--plot", help="Folder to write predicted-vs-measured and error-by-group PNGs."
    ),
    random_split: bool = typer.Option(
        False, "--random-split", help="Also print an optimistic random split over pairs, labelled as such."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of XGBoost's sampling and of the random split."),
    features: str = FEATURES,
    partner_effect: bool = PARTNER_EFFECT,
    tune: bool = typer.Option(
        False,
        "--tune",
        help="Choose feature set and tree parameters per fold by an inner grouped CV on the fold's "
        "training groups only (nested; about 50 fits per fold).",
    ),
):
    """Grouped cross-validation: hold out each workload/family/device in turn, next to baselines.

    Example: sharewise evaluate reference --group-by workload --plot figures/
    """
    from sharewise.datasets import read_datasets
    from sharewise.errors import ConfigError
    from sharewise.predictor import GROUP_BY, cross_validate, ordered_rows
    from sharewise.predictor.evaluation import summarize

    if group_by not in GROUP_BY:
        raise ConfigError(f"--group-by must be one of {list(GROUP_BY)}, got {group_by!r}")
    profiles, pairs = read_datasets(data)
    # Nested selection picks among feature sets, so it starts from all of them.
    rows = ordered_rows(profiles, pairs, features="all" if tune else features)
    cv = cross_validate(
        rows,
        group_by=group_by,
        random_split=random_split,
        features=features,
        partner_effect=partner_effect,
        tune=tune,
        random_state=seed,
    )
    summary = summarize(cv)
    if plot is not None:
        from sharewise.predictor.plots import plot_evaluation

        written = plot_evaluation(cv, plot)
        err_console.print(f"wrote {', '.join(str(p) for p in written)}")
    if as_json:
        print_json(summary)
        return
    table = Table(
        title=f"held-out {group_by}s: {summary['n_groups']} folds, {summary['n_samples']} ordered pairs "
        "(each scored when its own workload is unseen)"
    )
    for col in ("predictor", "MAE", "MAPE", "Spearman", "share-or-not acc.", "in p10-p90"):
        table.add_column(col, justify="left" if col == "predictor" else "right")
    rows = [("model (p50)", summary["model"])] + [
        (f"baseline: {k}", v) for k, v in summary["baselines"].items()
    ]
    for name, m in rows:
        table.add_row(
            name,
            _fmt(m["mae"]),
            _fmt(m["mape"], ".1f", "%"),
            _fmt(m["spearman"], ".2f"),
            _fmt(m.get("decision_accuracy"), ".1f", "%"),
            _fmt(m.get("coverage_p10_p90"), ".1f", "%"),
        )
    console.print(table)
    groups = Table(title=f"MAPE by held-out {group_by}")
    groups.add_column(group_by)
    groups.add_column("rows", justify="right")
    keys = [k for k in next(iter(summary["per_group"].values())) if k.endswith("_mape")]
    for k in keys:
        groups.add_column(k[: -len("_mape")], justify="right")
    for g, entry in summary["per_group"].items():
        groups.add_row(g, str(entry["n"]), *(_fmt(entry[k], ".1f", "%") for k in keys))
    console.print(groups)
    if tune:
        for f in summary["folds"]:
            chosen = ", ".join(f"{k}={v}" for k, v in f["chosen"].items() if k != "inner_mape")
            console.print(
                f"[dim]held out {f['group']}: inner CV on the other groups chose {chosen} "
                f"(inner MAPE {f['chosen']['inner_mape']:.1f}%)[/dim]"
            )
    if "random_split" in summary:
        m = summary["random_split"]["model"]
        console.print(
            f"[dim]optimistic, not the headline: random 5-fold split over pairs (test workloads seen in "
            f"training): MAPE {_fmt(m['mape'], '.1f', '%')}, MAE {_fmt(m['mae'])}[/dim]"
        )


def predict(
    workload_a: str = typer.Argument(..., help="Workload name as recorded in the profiles."),
    workload_b: str = typer.Argument(..., help="Its partner."),
    model_path: Path = typer.Option(..., "--model", "-m", help="Model file written by 'sharewise train'."),
    data: list[str] = typer.Option(
        ..., "--data", "-d", help="Dataset folder(s) with the profiles, or 'reference'."
    ),
    device: str = typer.Option(
        None, "--device", help="Device name (default: every device both are profiled on)."
    ),
    top: int = typer.Option(5, "--top", help="Contributions to show per prediction."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
):
    """Predict how much two workloads slow each other down when they share a device, and why.

    Example: sharewise predict --model model.json --data reference resnet18 lstm_lm
    """
    from sharewise.datasets import read_datasets
    from sharewise.errors import DatasetError
    from sharewise.predictor import SlowdownRegressor
    from sharewise.predictor.api import common_devices, explain_pair

    model = SlowdownRegressor.load(model_path)
    profiles, _ = read_datasets(data, pairs=False)
    devices = [device] if device else common_devices(profiles, workload_a, workload_b)
    if not devices:
        raise DatasetError(
            f"{workload_a!r} and {workload_b!r} have no profile on a common device; "
            "profile both on the same device"
        )
    results = [explain_pair(model, profiles, workload_a, workload_b, d, top=top) for d in devices]
    if as_json:
        print_json(results if len(results) > 1 else results[0])
        return
    table = Table(title="predicted slowdown when sharing (1.0 = no interference)")
    for col in ("device", "workload", "next to", "p10", "p50", "p90", "speed sum", "share?"):
        table.add_column(col, justify="right" if col in ("p10", "p50", "p90", "speed sum") else "left")
    for r in results:
        for side in ("a", "b"):
            s = r[side]
            table.add_row(
                r["device_name"],
                s["workload"],
                s["partner"],
                _fmt(s["p10"], ".2f"),
                _fmt(s["p50"], ".2f"),
                _fmt(s["p90"], ".2f"),
                _fmt(r["speed_sum"], ".2f") if side == "a" else "",
                ("yes" if r["sharing_worth_it"] else "no") if side == "a" else "",
            )
    console.print(table)
    for r in results:
        for side in ("a", "b"):
            s = r[side]
            contrib = Table(
                title=f"why: {s['workload']} next to {s['partner']} on {r['device_name']} "
                f"(log slowdown = {s['bias']:+.3f} baseline + contributions)"
            )
            for col in ("feature", "value", "contribution", "x slowdown"):
                contrib.add_column(col, justify="left" if col == "feature" else "right")
            for c in s["contributions"]:
                contrib.add_row(
                    c["feature"],
                    _fmt(c["value"], ".4g"),
                    f"{c['contribution']:+.3f}",
                    f"{math.exp(c['contribution']):.3f}",
                )
            console.print(contrib)


import_app = typer.Typer(
    name="import",
    help="Import measurements from other sources into a dataset folder (profiles + pairs).",
    no_args_is_help=True,
)


def _print_import(result) -> None:
    console.print(
        f"wrote {result.profiles} profiles and {result.pairs} pairs "
        f"({', '.join(f'{k} {v}' for k, v in sorted(result.status_counts.items())) or 'none'}) of "
        f"{len(result.workloads)} workloads on {', '.join(result.devices)} to {result.out}"
    )
    if result.static_features:
        sf = result.static_features
        console.print(
            f"static features: {sf.get('computed', 0)} computed, {sf.get('cached', 0)} reused, "
            f"{sf.get('missing', 0)} missing"
        )
    for w in result.warnings:
        err_console.print(f"warning: {w}")


@import_app.command("gavel")
def import_gavel(
    path: Path = typer.Argument(..., help="Gavel's simulation_throughputs.json."),
    out: Path = typer.Option(..., "--out", "-o", help="Dataset folder to write."),
    no_static: bool = typer.Option(False, "--no-static", help="Skip the zoo's device-independent features."),
    refresh_static: bool = typer.Option(False, "--refresh-static", help="Recompute cached static features."),
):
    """Import Gavel's measured co-location throughputs (K80, P100, V100).

    Example: sharewise import gavel ../shared/data/gavel/simulation_throughputs.json --out gavel-ds
    """
    from sharewise.datasets.importers import get_importer

    result = get_importer("gavel")(path, out, static_features=not no_static, refresh_static=refresh_static)
    _print_import(result)


@import_app.command("csv")
def import_csv(
    profiles: Path = typer.Option(
        ..., "--profiles", "-p", help="CSV: workload, optional family and device_name, numeric features."
    ),
    pairs: Path = typer.Option(
        ..., "--pairs", "-q", help="CSV: workload_a, workload_b, slowdown_a, slowdown_b, ..."
    ),
    out: Path = typer.Option(..., "--out", "-o", help="Dataset folder to write."),
):
    """Import anyone's measurements from two CSV files (generic format).

    Example: sharewise import csv --profiles profiles.csv --pairs pairs.csv --out my-ds
    """
    from sharewise.datasets.importers import get_importer

    _print_import(get_importer("csv")(profiles, pairs, out))


def register(app: typer.Typer) -> None:
    app.command()(train)
    app.command()(evaluate)
    app.command()(predict)
    app.add_typer(import_app, name="import")
