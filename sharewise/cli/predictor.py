"""CLI of the predictor commands: ``train``, ``evaluate``, ``predict``, ``suggest``."""

from __future__ import annotations

import math
from pathlib import Path

import typer

from sharewise.cli.common import Table, console, err_console, fmt, one_of, print_json, split_list
from sharewise.predictor.choices import BUDGET_STRATEGIES, FEATURE_SETS, GROUP_BY, STRUCTURE_CHOICES, plural

__all__ = ["BUDGET_STRATEGIES", "FEATURE_SETS", "GROUP_BY", "register", "render_predict", "render_train"]

DATA_DIRS = typer.Argument(..., help="Dataset folders (or the word 'reference' for the shipped dataset).")
FEATURES = typer.Option(
    "physical", "--features", help=one_of("Feature set (physical: no op-mix or batch-size columns)", FEATURE_SETS)
)
PARTNER_EFFECT = typer.Option(
    True,
    "--partner-effect/--no-partner-effect",
    help="Use each known partner's measured effect on the jobs it was paired with.",
)
STRUCTURE = typer.Option(
    "auto",
    "--structure",
    help=one_of(
        "The model's structure: the probe offset, + the partner's pressure, + trees; auto picks by grouped CV",
        STRUCTURE_CHOICES,
    ),
)


def train(
    data: list[str] = DATA_DIRS,
    out: Path = typer.Option(
        ..., "--out", "-o", help="Model file to write (.json); a .sidecar.json goes next to it."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of XGBoost's row and column sampling."),
    features: str = FEATURES,
    partner_effect: bool = PARTNER_EFFECT,
    calibrate_by: str = typer.Option(
        "family",
        "--calibrate-by",
        help=one_of("Calibrate p10/p90 on out-of-fold residuals holding out each", (*GROUP_BY, "none")),
    ),
    structure: str = STRUCTURE,
):
    """Train the slowdown model on every measured pair of the datasets, with conformal p10/p90.

    Prints the model card: what it was trained on, the structure grouped cross-validation chose and why, what
    the model uses, and its error beside the baselines. Your rows and the shipped ones of your GPU pool:
    sharewise train runs/gpu reference-h200 --out model.json

    Example: sharewise train runs/cpu reference --out model.json
    """
    from sharewise.app.prediction import TrainOptions
    from sharewise.app.prediction import train as run

    options = TrainOptions(
        data=tuple(data),
        out=out,
        seed=seed,
        features=features,
        partner_effect=partner_effect,
        calibrate_by=None if calibrate_by == "none" else calibrate_by,
        structure=structure,
    )
    render_train(run(options))


def render_train(result) -> None:
    """Say what a model was trained on, print its card, and where it was written."""
    card = getattr(result.model, "card_", None)
    if card:
        render_card(card)
    else:
        s = result.summary
        console.print(
            f"trained on {s['rows']} ordered rows ({s['pairs']} pairs) of {len(s['workloads'])} workloads on "
            f"{', '.join(s['devices'])}; {result.model.n_features_in_} features"
        )
    console.print(f"wrote {result.out} and {result.sidecar}")


def render_card(card: dict) -> None:
    """Print a model card (``predictor.capacity.model_card``): data, structure and why, what it uses, warnings."""
    modes = f" ({', '.join(card['modes'])})" if card.get("modes") else ""
    console.print(
        f"trained on {card['rows']} ordered rows ({card['pairs']} pairs) of {card['workloads']} workloads on "
        f"{', '.join(card['devices'])}{modes}",
        highlight=False,
    )
    if len(card.get("sources") or {}) > 1:
        console.print(
            "sources: " + ", ".join(f"{name} {rows} rows" for name, rows in card["sources"].items()), highlight=False
        )
    selection = card.get("selection", {})
    scores, baselines = selection.get("scores", {}), selection.get("baselines", {})
    if scores:
        console.print(
            f"structure chosen by grouped cross-validation (each {selection['group_by']} held out, "
            f"{selection['folds']} folds, {selection['rows_scored']} rows):",
            highlight=False,
        )
        table = Table()
        table.add_column("candidate")
        table.add_column("MAPE", justify="right")
        for name, value in scores.items():
            label = f"{name} (chosen)" if name == card["structure"] else name
            table.add_row(label, f"{value:.1f}%")
        for name, value in baselines.items():
            table.add_row(f"baseline: {name}", f"{value:.1f}%")
        console.print(table)
    console.print(f"structure: {card['structure']}: the model is {card['summary']}", highlight=False, soft_wrap=True)
    uses = card.get("uses", {})
    console.print(f"  offset: {uses.get('offset', 'none')}", highlight=False, soft_wrap=True)
    splits = uses.get("tree_splits", 0)
    if splits:
        top = ", ".join(f"{name} {n}" for name, n in list(uses.get("features_with_splits", {}).items())[:5])
        console.print(f"  trees: {splits} splits; most on {top}", highlight=False, soft_wrap=True)
    else:
        console.print("  trees: no split", highlight=False)
    if card.get("imprecise_rows"):
        console.print(
            f"measurements: {card['imprecise_rows']} of {card['rows']} rows missed the "
            f"{card['precision_target']:.0%} precision target; rows are weighted by precision "
            f"({card['weight_total']:.1f} rows' worth in all)",
            highlight=False,
            soft_wrap=True,
        )
    for warning in card.get("warnings", []):
        err_console.print(f"warning: {warning}", highlight=False, soft_wrap=True)


def evaluate(
    data: list[str] = DATA_DIRS,
    group_by: str = typer.Option(
        "workload",
        "--group-by",
        "-g",
        help=one_of("Held-out unit, never seen in training", GROUP_BY),
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
    budget: int = typer.Option(
        0,
        "--budget",
        "-k",
        help="Each held-out workload reveals this many of its measured pairs, chosen by each strategy "
        f"({', '.join(BUDGET_STRATEGIES)}); scored on the rest. 0: the plain evaluation.",
    ),
    structure: str = STRUCTURE,
):
    """Grouped cross-validation: hold out each workload/family/device in turn, next to baselines.

    Example: sharewise evaluate reference --group-by workload --budget 2 --plot figures/
    """
    from sharewise.app.prediction import EvaluateOptions
    from sharewise.app.prediction import evaluate as run

    result = run(
        EvaluateOptions(
            data=tuple(data),
            group_by=group_by,
            random_split=random_split,
            seed=seed,
            features=features,
            partner_effect=partner_effect,
            tune=tune,
            plot=plot,
            budget=budget,
            structure=structure,
        )
    )
    summary = result.summary
    if result.figures:
        err_console.print(f"wrote {', '.join(str(p) for p in result.figures)}")
    for note in result.notes:
        err_console.print(f"note: {note}", soft_wrap=True, highlight=False)
    if as_json:
        print_json(summary)
        return
    _print_evaluation(summary, group_by, tune)
    if "strategies" in summary:
        _print_strategies(summary)
    chosen = [fold.get("structure") for fold in summary.get("folds", []) if fold.get("structure")]
    if chosen:
        counts = ", ".join(f"{name} {chosen.count(name)}" for name in dict.fromkeys(chosen))
        console.print(f"structure per fold (chosen on each fold's training rows): {counts}", highlight=False)
    if summary.get("card"):
        console.print("the model train writes on all these rows:", highlight=False)
        render_card(summary["card"])


def _print_evaluation(summary: dict, group_by: str, tune: bool) -> None:
    table = Table(
        title=f"held-out {plural(group_by)}: {summary['n_groups']} folds, {summary['n_samples']} ordered pairs "
        "(each scored when its own workload is unseen)"
    )
    for col in ("predictor", "MAE", "MAPE", "Spearman", "share-or-not acc.", "in p10-p90"):
        table.add_column(col, justify="left" if col == "predictor" else "right")
    rows = [("model (p50)", summary["model"])] + [
        (f"baseline: {k}", v) for k, v in summary["baselines"].items()
    ]
    for name, m in rows:
        if m.get("not_applicable"):
            table.add_row(name, *["n/a"] * 5)
            continue
        table.add_row(
            name,
            fmt(m["mae"]),
            fmt(m["mape"], ".1f", "%"),
            fmt(m["spearman"], ".2f"),
            fmt(m.get("decision_accuracy"), ".1f", "%"),
            fmt(m.get("coverage_p10_p90"), ".1f", "%"),
        )
    console.print(table)
    for name, m in summary["baselines"].items():
        if m.get("not_applicable"):
            console.print(f"[dim]baseline {name}: n/a, {m['not_applicable']}[/dim]")
    groups = Table(title=f"MAPE and p10-p90 coverage by held-out {group_by}")
    groups.add_column(group_by)
    groups.add_column("rows", justify="right")
    keys = [k for k in next(iter(summary["per_group"].values())) if k.endswith("_mape")]
    for k in keys:
        groups.add_column(k[: -len("_mape")], justify="right")
    groups.add_column("in p10-p90", justify="right")
    for g, entry in summary["per_group"].items():
        cells = ("n/a" if entry[k] is None else fmt(entry[k], ".1f", "%") for k in keys)
        groups.add_row(g, str(entry["n"]), *cells, fmt(entry.get("model_coverage_p10_p90"), ".1f", "%"))
    console.print(groups)
    if len(summary.get("per_device", {})) > 1:
        devices = Table(title="MAPE and p10-p90 coverage by device (intervals are calibrated per device)")
        for col in ("device", "rows", "model", "in p10-p90", "above p90"):
            devices.add_column(col, justify="left" if col == "device" else "right")
        for d, entry in summary["per_device"].items():
            devices.add_row(
                d,
                str(entry["n"]),
                fmt(entry["model_mape"], ".1f", "%"),
                fmt(entry["model_coverage_p10_p90"], ".1f", "%"),
                fmt(entry["model_above_p90"], ".1f", "%"),
            )
        console.print(devices)
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
            f"training): MAPE {fmt(m['mape'], '.1f', '%')}, MAE {fmt(m['mae'])}[/dim]"
        )


def _print_strategies(summary: dict) -> None:
    k = summary["budget"]
    table = Table(
        title=f"budget {k}: each held-out workload reveals {k} measured pair(s); scored on the rest "
        f"(common: the {summary['n_common']} rows no strategy revealed)"
    )
    for col in ("strategy", "rows", "MAPE", "MAPE common", "share-or-not acc.", "in p10-p90"):
        table.add_column(col, justify="left" if col == "strategy" else "right")
    for name, m in summary["strategies"].items():
        table.add_row(
            name,
            str(m["n"]),
            fmt(m["mape"], ".1f", "%"),
            fmt(m["mape_common"], ".1f", "%"),
            fmt(m.get("decision_accuracy"), ".1f", "%"),
            "n/a" if m.get("coverage_p10_p90") is None else fmt(m["coverage_p10_p90"], ".1f", "%"),
        )
    console.print(table)


def suggest(
    model_path: Path = typer.Option(..., "--model", "-m", help="Model file written by 'sharewise train'."),
    data: list[str] = typer.Option(
        ..., "--data", "-d", help="Dataset folder(s) with the profiles and the pairs measured so far."
    ),
    workloads: list[str] = typer.Option(
        ..., "--workloads", "-w", help="New workload(s) to measure (repeat or comma-separate)."
    ),
    against: list[str] = typer.Option(
        None,
        "--against",
        help="Partners to choose among (default: every workload with measured pairs that is not new).",
    ),
    budget: int = typer.Option(1, "--budget", "-k", help="Pair runs per new workload."),
    device: str = typer.Option(
        None,
        "--device",
        help="Only this device (default: every device a new workload is profiled on; a partner profiled only on "
        "another device of the same kind is predicted with that profile standing in).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
):
    """Suggest the K pair runs per new workload that would most improve its predictions, each with why.

    Example: sharewise suggest --model model.json --data my-dataset --workloads my_new_model --budget 2
    """
    from sharewise.app.suggest import SuggestOptions
    from sharewise.app.suggest import suggest as run

    result = run(
        SuggestOptions(
            model=model_path,
            data=tuple(data),
            workloads=tuple(split_list(workloads)),
            against=tuple(split_list(against)),
            budget=budget,
            device=device,
        )
    )
    if as_json:
        print_json(result.to_json())
        return
    if not result.suggestions:
        console.print(f"nothing to suggest for {', '.join(result.workloads)}: {result.empty_reason}", soft_wrap=True)
        return
    table = Table(title=f"pair runs to measure (budget {result.budget} per new workload), in order")
    for col in ("workload", "#", "next to", "device", "speed sum p10-p90", "why"):
        table.add_column(col, justify="right" if col == "#" else "left")
    for s in result.suggestions:
        low, _, high = s.speed_sum
        partner = s.partner if s.stand_in is None else f"{s.partner} (profile from {s.stand_in})"
        table.add_row(s.workload, str(s.rank), partner, s.device_name, f"{low:.2f}-{high:.2f}", s.reason)
    console.print(table)
    for note in result.notes:
        console.print(f"note: {note}", soft_wrap=True, highlight=False)


def predict(
    workload_a: str = typer.Argument(..., help="Workload name as recorded in the profiles."),
    workload_b: str = typer.Argument(..., help="Its partner."),
    model_path: Path = typer.Option(..., "--model", "-m", help="Model file written by 'sharewise train'."),
    data: list[str] = typer.Option(
        ..., "--data", "-d", help="Dataset folder(s) with the profiles, or 'reference'."
    ),
    device: str = typer.Option(
        None,
        "--device",
        help="Device name (default: every device both are profiled on; where none, this machine's, the other's "
        "profile from a device of the same kind standing in).",
    ),
    top: int = typer.Option(5, "--top", help="Contributions to show per prediction."),
    split: str = typer.Option(
        None,
        "--split",
        help="The sharing knob's split A:B in percent, e.g. 70:30 (the first workload's share of the device: an MPS "
        "thread percentage on a GPU, a CPU quota on a CPU); default no knob.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
):
    """Predict how much two workloads slow each other down when they share a device, and why.

    Example: sharewise predict --model model.json --data reference resnet18 lstm_lm --split 70:30
    """
    from sharewise.app.prediction import PredictOptions
    from sharewise.app.prediction import predict as run

    results = run(
        PredictOptions(
            model=model_path, data=tuple(data), workload_a=workload_a, workload_b=workload_b, device=device, top=top,
            split=split,
        )
    )
    for note in sorted({r["note"] for r in results if r.get("note")}):
        err_console.print(f"[yellow]warning:[/yellow] {note}", soft_wrap=True)
    if as_json:
        print_json(results if len(results) > 1 else results[0])
        return
    render_predict(results)


def render_predict(results: list[dict]) -> None:
    """Print both predicted slowdowns per device, then the features that moved each prediction most."""
    split = results[0].get("split") if results else None
    title = "predicted slowdown when sharing (1.0 = no interference)"
    if split is not None:
        title += f", split {int(split)}:{100 - int(split)}"
    table = Table(title=title)
    for col in ("device", "workload", "next to", "p10", "p50", "p90", "speed sum", "share?"):
        table.add_column(col, justify="right" if col in ("p10", "p50", "p90", "speed sum") else "left")
    for r in results:
        for side in ("a", "b"):
            s = r[side]
            table.add_row(
                r["device_name"],
                s["workload"],
                s["partner"],
                fmt(s["p10"], ".2f"),
                fmt(s["p50"], ".2f"),
                fmt(s["p90"], ".2f"),
                fmt(r["speed_sum"], ".2f") if side == "a" else "",
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
                    fmt(c["value"], ".4g"),
                    f"{c['contribution']:+.3f}",
                    f"{math.exp(c['contribution']):.3f}",
                )
            console.print(contrib)


def register(app: typer.Typer) -> None:
    app.command()(train)
    app.command()(evaluate)
    app.command()(predict)
    app.command()(suggest)
