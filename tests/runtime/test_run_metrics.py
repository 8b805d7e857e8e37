"""Live Prometheus metrics of ``sharewise run --metrics-port`` (issue 39, part 2) and the Grafana dashboard that
plots them: the exporter serves every family with its labels, a port in use is one line and exit 2 before any
job starts, the dashboard asks only for what is served, and a real run serves its jobs' series while they run.

Scrapes go through ``urllib`` and ``prometheus_client``'s own text parser, as Prometheus reads the endpoint.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from test_observe_prometheus import PrometheusServer, wait_for
from test_physical import SLEEP, _dataset, _trace

from sharewise.runtime.metrics import JOB_LABELS, METRICS, JobView, MetricsPortError, PolicyView, RunExporter

pytest.importorskip("prometheus_client", reason="prometheus-client is a core dependency: pip install -e .")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "assets" / "grafana" / "sharewise-run.json"


def scrape(url: str) -> dict:
    """``{family name: [samples]}`` of one scrape."""
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def _view() -> PolicyView:
    """Two jobs sharing slot 0 and one paused (literal values, as ``policy_view`` makes them)."""
    return PolicyView(
        policy="sharewise", clock_s=12.5, slot_jobs=(2,), decisions=4, preemptions=1, failures=0,
        jobs=(JobView("a", "cnn", "0", "running", "b", 41.2, 60.3, 1.46, 1.38, 1.61, 120, 500.0, True),
              JobView("b", "mlp", "0", "running", "a", 20.0, 22.0, 1.1, 1.05, 1.2, 80, 9000.0, False),
              JobView("c", "ncf", "none", "paused", steps=10, length_steps=40.0)),
    )


@pytest.fixture
def exporter():
    exp = RunExporter("127.0.0.1", 0)
    yield exp
    exp.close()


def test_the_exporter_serves_every_family_with_its_labels(exporter):
    exporter.update(_view())
    families = scrape(exporter.url)
    assert set(METRICS) <= set(families)
    observed = families["sharewise_run_job_observed_slowdown"]
    assert {s.labels["job_id"] for s in observed} == {"a", "b"}  # the paused job's rate is unknown: left out
    for name in METRICS:
        if name.startswith("sharewise_run_job_"):
            for sample in families[name]:
                assert set(JOB_LABELS) <= set(sample.labels) and math.isfinite(sample.value)
    p50 = {s.labels["job_id"]: (s.labels["partner"], s.value)
           for s in families["sharewise_run_job_predicted_slowdown_p50"]}
    assert p50 == {"a": ("b", 1.38), "b": ("a", 1.05)}
    states = {s.labels["job_id"]: s.labels["state"] for s in families["sharewise_run_job_state"]}
    assert states == {"a": "running", "b": "running", "c": "paused"}
    assert [s.value for s in families["sharewise_run_slot_jobs"]] == [2.0]
    counters = {s.name: s.value for f in ("sharewise_run_decisions", "sharewise_run_preemptions",
                                          "sharewise_run_failures") for s in families[f]}
    assert counters == {"sharewise_run_decisions_total": 4.0, "sharewise_run_preemptions_total": 1.0,
                        "sharewise_run_failures_total": 0.0}


def test_a_port_in_use_is_a_named_error_and_one_line_exit_2_before_anything_starts(tmp_path, exporter, capsys):
    with pytest.raises(MetricsPortError, match=f"127.0.0.1:{exporter.port}"):
        RunExporter("127.0.0.1", exporter.port)
    from sharewise.cli import main
    from sharewise.runtime.slots import cpu_layout

    data = _dataset(tmp_path, cpu_layout(1).device_name)
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as stop:
        main(["run", str(_trace(tmp_path, [("a", 0, SLEEP, 5)])), "--data", str(data), "--oracle", "--out", str(out),
              "--metrics-port", str(exporter.port)])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("error: --metrics-port") and "choose a free port" in err
    assert not out.exists()


def _panels(panels: list) -> list:
    out = []
    for p in panels:
        out.append(p)
        out += _panels(p.get("panels", []))
    return out


def test_the_grafana_dashboard_plots_only_metrics_the_exporter_serves(exporter):
    dash = json.loads(DASHBOARD.read_text())
    exporter.update(_view())
    served = {s.name for samples in scrape(exporter.url).values() for s in samples}
    exprs = [t["expr"] for p in _panels(dash["panels"]) for t in p.get("targets", [])]
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    exprs += [v["query"]["query"] for v in variables.values() if v["type"] == "query"]
    named = {m for e in exprs for m in re.findall(r"sharewise_run_\w+", e)}
    assert named and named <= served, named - served
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    per_job = [p for p in _panels(dash["panels"]) if p.get("repeat") == "job_id"]
    assert per_job and per_job[0]["type"] == "timeseries"
    plotted = " ".join(t["expr"] for t in per_job[0]["targets"])
    assert all(m in plotted for m in ("observed_slowdown", "predicted_slowdown_p50", "predicted_slowdown_p90"))
    assert any(p["type"] == "table" and "sharewise_run_job_state" in p["targets"][0]["expr"]
               for p in _panels(dash["panels"]))
    for p in _panels(dash["panels"]):
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_a_run_serves_its_jobs_series_while_they_run(tmp_path):
    """Two sleep jobs that sjf-ffs puts on one slot: scraped while the run goes, the endpoint shows each running
    job with its labels, a finite step rate, solo rate and observed slowdown, and its partner's predicted
    slowdown; the run's counters; then the run ends normally."""
    from sharewise.runtime.slots import cpu_layout

    data = _dataset(tmp_path, cpu_layout(1).device_name)
    trace = _trace(tmp_path, [("x", 0, SLEEP, 800), ("y", 0.2, SLEEP, 800)])
    port = _free_port()
    logs = tmp_path / "out.txt", tmp_path / "err.txt"
    with open(logs[0], "w") as out, open(logs[1], "w") as err:  # files, not pipes: nothing blocks the run
        proc = subprocess.Popen(
            [sys.executable, "-m", "sharewise", "run", str(trace), "--data", str(data), "--oracle", "--policy",
             "sjf-ffs", "--calibrate", "1", "--out", str(tmp_path / "run"), "--metrics-port", str(port)],
            stdout=out, stderr=err, text=True, env={**os.environ, "COLUMNS": "200"})
    url = f"http://127.0.0.1:{port}/metrics"
    seen_pair = None
    try:
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline and seen_pair is None:
            try:
                families = scrape(url)
            except OSError:  # not serving yet
                time.sleep(0.2)
                continue
            running = families.get("sharewise_run_job_observed_slowdown", [])
            pairs = [s for s in families.get("sharewise_run_job_predicted_slowdown_p50", [])
                     if s.labels["partner"] != "none"]
            if pairs and len(running) == 2:
                seen_pair = families
            time.sleep(0.2)
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = logs[1].read_text()
    assert proc.returncode == 0, err[-3000:]
    assert seen_pair is not None, f"no scrape showed the two jobs sharing; stderr: {err[-2000:]}"
    for name in ("sharewise_run_job_steps_per_second", "sharewise_run_job_solo_steps_per_second",
                 "sharewise_run_job_observed_slowdown", "sharewise_run_job_predicted_slowdown_p90",
                 "sharewise_run_job_state", "sharewise_run_slot_jobs", "sharewise_run_decisions"):
        samples = seen_pair[name]
        assert samples and all(math.isfinite(s.value) for s in samples), name
        assert all(s.labels.get("policy") == "sjf-ffs" for s in samples)
    rates = {s.labels["job_id"]: s for s in seen_pair["sharewise_run_job_steps_per_second"]}
    assert set(rates) == {"x", "y"} and all(s.value > 0 and s.labels["slot"] == "0" for s in rates.values())
    partners = {s.labels["job_id"]: s.labels["partner"] for s in seen_pair["sharewise_run_job_predicted_slowdown_p50"]}
    assert partners == {"x": "y", "y": "x"}
    assert [s.value for s in seen_pair["sharewise_run_slot_jobs"]] == [2.0]
    assert f"serving live metrics at {url}" in " ".join(err.split())


def test_the_guide_lists_every_metric_the_exporter_serves():
    guide = (Path(__file__).resolve().parents[2] / "docs" / "guides" / "live-metrics.md").read_text()
    listed = set(re.findall(r"^\| `(sharewise_run_\w+)`", guide, re.MULTILINE))
    served = {name + ("_total" if kind == "counter" else "") for name, (kind, _) in METRICS.items()}
    assert listed == served


# ---- the guide's queries and the dashboard's panels, asked of a real Prometheus ---------------------------------
GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "live-metrics.md"


def _served_view(policy: str, jobs: tuple[JobView, ...], slot_jobs: tuple[int, ...]) -> PolicyView:
    return PolicyView(policy=policy, clock_s=30.0, jobs=jobs, slot_jobs=slot_jobs, decisions=6, preemptions=1,
                      failures=0)


def _two_policies() -> list[PolicyView]:
    """Two policies' runs of one trace (as a run of several policies serves them): in each, a job runs worse than
    its p90 predicts next to its partner (the guide's second query has an answer), others run or wait."""
    return [
        _served_view("sharewise", (
            JobView("a", "cnn", "0", "running", "b", 41.2, 60.3, 1.46, 1.38, 1.61, 120, 500.0, True),
            JobView("b", "mlp", "0", "running", "a", 16.9, 22.0, 1.3, 1.05, 1.2, 80, 9000.0, False),
            JobView("c", "ncf", "none", "paused", steps=10, length_steps=40.0)), (2,)),
        _served_view("exclusive-sjf", (
            JobView("a", "cnn", "0", "running", "", 58.0, 60.3, 1.04, 1.0, 1.0, 300, 500.0, True),
            JobView("b", "mlp", "none", "queued", length_steps=9000.0, length_known=False),
            JobView("c", "ncf", "1", "running", "", 9.0, 9.1, 1.01, 1.0, 1.0, 40, 40.0, True)), (1, 1)),
    ]


def _api(base: str, path: str, **params) -> dict:
    """One call of Prometheus's HTTP API; its JSON body, an error answer's included (it says what was wrong)."""
    address = f"{base}{path}?{urllib.parse.urlencode(params, doseq=True)}"
    try:
        with urllib.request.urlopen(address, timeout=10) as resp:
            return json.loads(resp.read().decode())
    except urllib.error.HTTPError as exc:
        return json.loads(exc.read().decode())


def guide_queries() -> list[str]:
    """Every expression of the guide's ``promql`` blocks (one per line, ``#`` lines are their captions)."""
    blocks = re.findall(r"```promql\n(.*?)```", GUIDE.read_text(), re.DOTALL)
    lines = [line.strip() for b in blocks for line in b.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def _substitute(text: str, values: dict[str, list[str]]) -> str:
    """Grafana's ``$name`` / ``${name}`` variables replaced as Grafana does with *All* selected: in a regex match
    (``=~"$name"``) by every value (``(a|b)``), elsewhere (a repeated panel's ``="$name"``) by one of them. An
    unknown variable fails, naming it."""
    def one(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        assert name in values, f"{text!r} uses ${name}, which the dashboard does not define ({sorted(values)})"
        if text[: m.start()].endswith('=~"'):
            # Grafana's escape: a regex metacharacter gets a backslash, itself escaped in the PromQL string
            return "(" + "|".join(re.sub(r"[$^*+?.()|\\{}\[\]]", r"\\\\\g<0>", v) for v in values[name]) + ")"
        return values[name][0]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", one, text)


@pytest.fixture(scope="module")
def scraped_run(tmp_path_factory):
    """A Prometheus server scraping a run's metrics endpoint every second, once it holds every served series."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("needs the prometheus binary (Debian: apt-get install prometheus; .ci/run installs it)")
    exp = RunExporter("127.0.0.1", 0)
    views = _two_policies()
    for view in views:
        exp.update(view)
    n_state = sum(len(v.jobs) for v in views)
    try:
        with PrometheusServer(tmp_path_factory.mktemp("prometheus"), [f"127.0.0.1:{exp.port}"], binary) as server:
            def scraped():
                body = _api(server.url, "/api/v1/query", query="count(sharewise_run_job_state)")
                result = body.get("data", {}).get("result", [])
                return result and int(float(result[0]["value"][1])) == n_state

            wait_for(scraped, 60, "Prometheus scraped the run's metrics", server.proc)
            time.sleep(2.5)  # two scrapes more: a range query of the last seconds has points to plot
            yield server.url
    finally:
        exp.close()


def test_the_guides_queries_answer_per_job_on_a_real_prometheus(scraped_run):
    queries = guide_queries()
    assert len(queries) >= 2, f"no promql blocks read from {GUIDE}"
    for query in queries:
        body = _api(scraped_run, "/api/v1/query", query=query)
        assert body["status"] == "success", f"{query}: {body.get('errorType')}: {body.get('error')}"
        series = [r["metric"] for r in body["data"]["result"]]
        assert series, f"{query}: no series on a run that serves every metric it names"
        keys = [(s.get("job_id"), s.get("policy")) for s in series]
        assert None not in {k[0] for k in keys} and len(set(keys)) == len(keys), f"{query}: not per job: {series}"


def test_every_dashboard_variable_and_panel_answers_on_a_real_prometheus(scraped_run):
    """The dashboard's variables resolved as Grafana does (``label_values`` through the label API, in order, *All*
    of their values selected), then every panel's every target evaluated as its panel asks (range or instant):
    each answers without error and with series; a legend names labels each series has and tells them apart;
    the table shows or hides every label its series carry."""
    dash = json.loads(DASHBOARD.read_text())
    values = {"datasource": ["prometheus"]}
    for var in dash["templating"]["list"]:
        if var["type"] != "query":
            continue
        query = _substitute(var["query"]["query"], values)
        m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query)
        assert m, f"variable {var['name']}: {query!r} is not label_values(selector, label)"
        body = _api(scraped_run, f"/api/v1/label/{m.group(2)}/values", **{"match[]": m.group(1)})
        assert body["status"] == "success" and body["data"], f"variable {var['name']} ({query}): {body}"
        values[var["name"]] = sorted(body["data"])
    now = time.time()
    checked = 0
    for panel in _panels(dash["panels"]):
        if panel.get("repeat"):
            assert panel["repeat"] in values, f"{panel['title']} repeats over an undefined variable"
        for target in panel.get("targets", []):
            expr = _substitute(target["expr"], values)
            if target.get("instant"):
                body = _api(scraped_run, "/api/v1/query", query=expr, time=f"{now:.3f}")
            else:
                body = _api(scraped_run, "/api/v1/query_range", query=expr, start=f"{now - 5:.3f}",
                            end=f"{now:.3f}", step="1")
            where = f"panel {panel['title']!r} {target['refId']}: {expr}"
            assert body["status"] == "success", f"{where}: {body.get('errorType')}: {body.get('error')}"
            series = [r["metric"] for r in body["data"]["result"]]
            assert series, f"{where}: no series"
            names = re.findall(r"\{\{\s*(\w+)\s*\}\}", target.get("legendFormat", ""))
            if names:
                assert all(n in s for s in series for n in names), f"{where}: legend labels {names}, series {series}"
                legends = [tuple(s[n] for n in names) for s in series]
                assert len(set(legends)) == len(legends), f"{where}: legends {legends} do not tell series apart"
            if panel["type"] == "table":
                organize = next(t["options"] for t in panel["transformations"] if t["id"] == "organize")
                named = set(organize["indexByName"]) | set(organize["excludeByName"])
                assert {k for s in series for k in s} <= named, f"{where}: columns neither shown nor hidden"
            checked += 1
    assert checked >= 10
