"""Application functions of the measuring commands: ``workloads``, ``profile``, ``pairs`` and ``show``.

Each takes typed options and returns a result object; the CLI renders it. Progress (a row measured, a pair
done) reaches the caller through a callback, since a campaign runs for minutes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sharewise.errors import DatasetError
from sharewise.profiler.config import RunConfig

if TYPE_CHECKING:  # only the result types name it: ``workloads`` lists without pandas
    import pandas as pd


def workloads() -> list[dict]:
    """Describe every built-in workload (``Workload.describe`` of each registered class).

    Example: ``[{"name": "a3c", "family": "a3c", "default_batch_size": 16, "kind": "train", ...}, ...]``.
    """
    from sharewise.profiler.workloads import describe_workload, workload_names

    # Read from the classes' source: importing them imports torch, which a listing does not need.
    return [describe_workload(name) for name in workload_names()]


@dataclass(frozen=True)
class ProfileOptions:
    """``sharewise profile``: the workloads (names or specs), the dataset folder, and the run settings."""

    workloads: tuple[str, ...]
    out: Path
    config: RunConfig
    all_devices: bool = False
    use_cache: bool = True


@dataclass
class ProfileResult:
    """The profile rows written (in order) and a warning per noisy profile (``noisy_profile_warning``)."""

    out: Path
    rows: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def profile(
    options: ProfileOptions, on_row: Callable[[dict, str | None], None] | None = None
) -> ProfileResult:
    """Profile each workload alone and persist each row as it lands; ``on_row(row, warning)`` after each."""
    from sharewise.profiler.api import profile_many
    from sharewise.profiler.solo import noisy_profile_warning

    result = ProfileResult(out=options.out)

    def landed(row: dict) -> None:
        warning = noisy_profile_warning(row, options.config.repeats)
        result.rows.append(row)
        if warning:
            result.warnings.append(warning)
        if on_row is not None:
            on_row(row, warning)

    profile_many(
        list(options.workloads),
        options.config,
        out=options.out,
        all_devices=options.all_devices,
        use_cache=options.use_cache,
        on_row=landed,
    )
    return result


@dataclass(frozen=True)
class PairsOptions:
    """``sharewise pairs``: workloads, dataset folder, run settings, and where the pair runs execute."""

    workloads: tuple[str, ...]
    out: Path
    config: RunConfig
    executor: str = "local"
    address: str | None = None
    ray_cpus: int | None = None
    max_retries: int = 2
    retry_failed: bool = False
    budget: int | None = None  # K pairs per workload without pairs, picked by the model (see profiler.budget)
    model: Path | None = None
    #: The sharing knob's splits to measure at (job a's share; ``(None,)``: without a knob), one campaign each.
    splits: tuple[float | None, ...] = (None,)


@dataclass
class PairsResult:
    """A campaign's summary (``CampaignSummary``) and the dataset's pairs table after it."""

    summary: object
    pairs: pd.DataFrame


def pairs(options: PairsOptions, on_event: Callable | None = None) -> PairsResult:
    """Measure every unordered pair of the workloads into ``out`` (resuming what is there); see ``run_campaign``.

    With ``budget`` K only the workloads without pairs get pairs, K each, picked by the model at
    ``model``. Raises ``CampaignInterrupted`` (a ``KeyboardInterrupt``) on SIGTERM or Ctrl-C, after the
    workers are gone; the rows written stay.
    """
    from sharewise.app.budget import BudgetPicker
    from sharewise.datasets.store import Dataset
    from sharewise.profiler.campaign import AllPairs, run_campaign
    from sharewise.profiler.executors import executor_factory

    model = None
    if options.model is not None:
        from sharewise.predictor import SlowdownRegressor

        model = SlowdownRegressor.load(options.model)

    factory = executor_factory(
        options.executor,
        address=options.address,
        cpus_per_task=options.ray_cpus,
        max_retries=options.max_retries,
    )
    if any(s is not None for s in options.splits):  # one error before anything runs, where no knob can be set
        from sharewise.profiler.knob import knob_for

        options.config.replace(split=next(s for s in options.splits if s is not None))  # validates the split
        knob_for(options.config.mode).check()
    summary = None
    for split in options.splits:
        # The pairs to measure: all of them, or the budget's picks (one at a time, each after the last is written).
        picker = AllPairs() if options.budget is None else BudgetPicker(options.budget, model)
        summary = run_campaign(
            list(options.workloads),
            options.config.replace(split=split),
            options.out,
            executor_factory=factory,
            on_event=on_event,
            retry_failed=options.retry_failed,
            picker=picker,
        )
    return PairsResult(summary=summary, pairs=Dataset(options.out).read_pairs())


@dataclass
class ShowResult:
    """What ``show`` prints: the folder, its ``meta.json``, counts, and both tables."""

    path: Path
    meta: dict
    overview: dict
    profiles: pd.DataFrame
    pairs: pd.DataFrame

    def to_json(self) -> dict:
        """Counts, ``meta`` and the slowdown matrix (row next to column), e.g. ``{"profiles": 8, ...}``."""
        from sharewise.datasets.summary import slowdown_matrix

        matrix = slowdown_matrix(self.pairs)
        return {
            **self.overview,
            "slowdown_matrix": {r: {c: matrix.loc[r, c] for c in matrix.columns} for r in matrix.index},
            "meta": self.meta,
        }


def show(data: str | os.PathLike) -> ShowResult:
    """Read a dataset folder (or ``reference``) for ``sharewise show``."""
    from sharewise.datasets.store import open_dataset
    from sharewise.datasets.summary import dataset_overview

    ds = open_dataset(data, profiles=False)
    if not ds.exists():
        raise DatasetError(f"{str(data)!r} holds neither profiles/ nor pairs/; is it a sharewise dataset folder?")
    profiles, pairs_table = ds.read_profiles(), ds.read_pairs()
    return ShowResult(
        path=ds.path,
        meta=ds.read_meta(),
        overview=dataset_overview(profiles, pairs_table),
        profiles=profiles,
        pairs=pairs_table,
    )
