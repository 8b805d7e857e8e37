"""Benchmark: a real Prometheus server scrapes ``sharewise run --metrics-port`` while built-in workloads share a slot,
and the stored series are read back over its HTTP API: what the Grafana dashboard plots (issue 39, part 2).

Three reference workloads (``--size small``, 10-30 s of work each) arrive one after another on one CPU slot under
``sjf-bsbf`` (it shares), with the ``reference`` dataset's out-of-fold predictions as the policy's view. Debian's
``prometheus`` scrapes the run's endpoint every second on 127.0.0.1. Afterwards ``query_range`` reads, per job, the
observed slowdown and the predicted p50 and p90 next to its partner; they go to ``series.csv`` and ``series.png``
(the dashboard's "predicted against observed" panel, drawn with matplotlib), and the run's own verdict and the
metric families seen to ``summary.json``. Run on an idle machine from the repository root:

    .venv/bin/python benchmarks/bench_run_metrics.py --out benchmarks/results/run-metrics-<date>
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "runtime"))
sys.path.insert(0, str(REPO / "tests"))  # the real-Prometheus helper of tests/runtime/test_observe_prometheus.py

SERIES = ("sharewise_run_job_observed_slowdown", "sharewise_run_job_predicted_slowdown_p50",
          "sharewise_run_job_predicted_slowdown_p90", "sharewise_run_job_steps_per_second")


def query_range(url: str, query: str, start: float, end: float) -> list[dict]:
    params = urllib.parse.urlencode({"query": query, "start": start, "end": end, "step": "1s"})
    with urllib.request.urlopen(f"{url}/api/v1/query_range?{params}", timeout=30) as r:
        return json.loads(r.read())["data"]["result"]


def plot(df, path: Path) -> None:
    """Observed against predicted slowdown per job; each series (a metric next to one partner) its own line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    jobs = sorted(df.job.unique())
    fig, axes = plt.subplots(len(jobs), 1, figsize=(8, 2.2 * len(jobs)), sharex=True, squeeze=False)
    styles = ((SERIES[0], "-", "C0", "observed"), (SERIES[1], "--", "C1", "predicted p50"),
              (SERIES[2], ":", "C2", "predicted p90"))
    for ax, job in zip(axes[:, 0], jobs, strict=True):
        d = df[df.job == job]
        for metric, style, color, label in styles:
            for k, (_, s) in enumerate(d[d.metric == metric].fillna({"partner": ""}).groupby("partner")):
                s = s.sort_values("time")
                ax.plot(s.time, s.value, style, color=color, marker="." if metric == SERIES[0] else None,
                        label=label if k == 0 else None)
        ax.set_ylabel(f"{job} ({d.workload.iloc[0]})\nslowdown")
        ax.legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("seconds since the run began (Prometheus, 1 s scrapes)")
    fig.suptitle("sharewise run --metrics-port: predicted against observed slowdown per job (sjf-bsbf, one CPU slot)",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str]) -> None:
    from test_observe_prometheus import PrometheusServer, free_port

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "bench-run-metrics")
    args = parser.parse_args(argv)
    binary = shutil.which("prometheus")
    if binary is None:
        raise SystemExit("needs the prometheus binary (Debian: apt-get install prometheus)")
    args.out.mkdir(parents=True, exist_ok=True)
    trace = args.out / "trace.csv"
    trace.write_text("job_id,arrival_s,workload,gpus,duration_s\nj0,0,lstm_lm,1,30\nj1,3,mobilenet_v2,1,20\n"
                     "j2,6,ncf,1,15\n")
    port = free_port()
    with PrometheusServer(args.out / "prometheus", [f"127.0.0.1:{port}"], binary) as server:
        began = time.time()
        cmd = [sys.executable, "-m", "sharewise", "run", str(trace), "--data", "reference", "--device", "cpu",
               "--policy", "sjf-bsbf", "--calibrate", "3", "--out", str(args.out / "run"), "--json",
               "--metrics-port", str(port)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        time.sleep(2)
        ended = time.time()
        if done.returncode != 0:
            raise SystemExit(f"sharewise run failed ({done.returncode}): {done.stderr[-2000:]}")
        rows = []
        for name in SERIES:
            for s in query_range(server.url, name, began, ended):
                for t, v in s["values"]:
                    rows.append({"time": float(t) - began, "metric": name, "job": s["metric"].get("job_id", ""),
                                 "workload": s["metric"].get("workload", ""),
                                 "partner": s["metric"].get("partner", ""), "value": float(v)})
    import pandas as pd

    df = pd.DataFrame(rows)
    df.to_csv(args.out / "series.csv", index=False)
    result = json.loads(done.stdout)
    summary = {"verdict": result.get("verdict"), "metrics": result.get("policies"),
               "series_points": {m: int((df.metric == m).sum()) for m in SERIES}}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    plot(df, args.out / "series.png")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
