"""``sharewise demo``: the whole chain on the CPU in a few minutes, every output left in one folder.

Each step calls the application function of the command a user would run, and hands its result object to
the caller's ``DemoHooks`` to render, so the demo shows exactly what the commands show.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

DEMO_WORKLOADS = ("a3c", "ncf", "lstm_lm")
#: The recommend step: a queue of one job per reference workload on this many free GPUs.
DEMO_QUEUE_JOBS = 8
DEMO_GPUS = 5
#: The simulation of the report step: a seeded synthetic trace on a small cluster.
DEMO_SIM_GPUS = 16
DEMO_SIM_JOBS = 300


class DemoHooks(Protocol):
    """What the demo tells its caller: a step begins, a step's result is ready, a campaign made progress."""

    def step(self, title: str) -> None: ...

    def result(self, result: object) -> None: ...

    def campaign_event(self, event: object) -> None: ...


@dataclass(frozen=True)
class DemoOptions:
    """Where the demo writes, which workloads it measures, and how long each window and how many repeats."""

    out: Path = Path("demo-out")
    workloads: tuple[str, ...] = DEMO_WORKLOADS
    window_s: float = 1.0
    repeats: int = 3


@dataclass
class DemoResult:
    """Every step's result object, in order, and the folder holding the outputs."""

    out: Path
    steps: list[object]


def demo(options: DemoOptions, hooks: DemoHooks) -> DemoResult:
    """Profile and pair the workloads, train, predict a pair, recommend for a queue, simulate and report.

    Fails before the first measurement where the predictor's XGBoost is not installed (``MissingDependencyError``
    naming the extra), not after minutes of measuring."""
    from sharewise.predictor.xgboost_import import xgboost_module

    # Training comes after minutes of measuring: import XGBoost now, so an install without the cpu or gpu extra
    # hears what to install at once, in the words training would use.
    xgboost_module()
    import pandas as pd

    from sharewise.app.prediction import PredictOptions, TrainOptions, predict, train
    from sharewise.app.profiling import PairsOptions, pairs
    from sharewise.app.recommend import RecommendConfig, recommend
    from sharewise.app.report import write_report
    from sharewise.datasets.store import Dataset
    from sharewise.profiler.config import RunConfig

    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    data = out / "data"
    names = list(options.workloads)
    steps: list[object] = []

    def done(result: object) -> None:
        steps.append(result)
        hooks.result(result)

    hooks.step(f"1/6 profile and measure all pairs of {', '.join(names)} on the CPU")
    # No extra repeats for noisy pairs here: the demo shows the chain in minutes; campaigns keep the default.
    config = RunConfig(window_s=options.window_s, repeats=options.repeats, max_repeats=options.repeats)
    done(pairs(PairsOptions(workloads=tuple(names), out=data, config=config), on_event=hooks.campaign_event))

    hooks.step("2/6 train the slowdown predictor on the reference dataset and these measurements")
    model = out / "model.json"
    done(train(TrainOptions(data=("reference", str(data)), out=model)))

    hooks.step(f"3/6 predict {names[0]} next to {names[-1]} from their solo profiles")
    done(predict(PredictOptions(model=model, data=(str(data),), workload_a=names[0], workload_b=names[-1])))

    hooks.step("4/6 recommend which queued jobs share a GPU")
    ref_workloads = sorted(Dataset("reference").read_profiles()["workload"])
    queue = pd.DataFrame(
        {
            "job_id": [f"job{i}" for i in range(DEMO_QUEUE_JOBS)],
            "workload": [ref_workloads[i % len(ref_workloads)] for i in range(DEMO_QUEUE_JOBS)],
        }
    )
    queue_path = out / "queue.csv"
    queue.to_csv(queue_path, index=False)
    done(recommend(RecommendConfig(model=str(model), data="reference", queue=str(queue_path), gpus=DEMO_GPUS)))

    hooks.step("5/6 simulate a cluster: every policy on one synthetic trace, truth = measured reference pairs")
    report = write_report(["reference", data], out / "report", n_gpus=DEMO_SIM_GPUS, n_jobs=DEMO_SIM_JOBS, seed=0)
    done(report)
    hooks.step("6/6 report")
    return DemoResult(out=out, steps=steps)
