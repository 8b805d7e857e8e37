"""What ``sharewise collect`` says when it is pointed at the wrong thing: a server that is not Prometheus is one
line naming the URL, the HTTP status and the content type it got (never the page), and an empty time range shows
its ends as ISO times and their distance, not unix seconds. Real servers on 127.0.0.1, the CLI as a user runs it."""

from __future__ import annotations

import functools
import http.server
import re
import threading

import pytest

from sharewise.errors import ConfigError
from sharewise.observe.series import duration, iso_time, read_prometheus


class QuietFiles(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # its access log would share stderr with the line under test
        pass


@pytest.fixture
def html_server(tmp_path):
    """A plain web server (the standard library's), which answers every API path with its HTML 404 page."""
    handler = functools.partial(QuietFiles, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _collect_error(capsys, *args: str) -> str:
    from sharewise.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["collect", *args])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def test_a_web_server_that_is_not_prometheus_is_one_line_with_its_status_and_content_type(html_server, capsys):
    line = _collect_error(capsys, "--prometheus", html_server, "--start", "-5m", "--end", "now")
    assert f"{html_server} is not a Prometheus server" in line
    assert "HTTP 404 with text/html" in line and "<" not in line


def test_a_jobs_metrics_port_given_as_the_server_says_so(capsys):
    pytest.importorskip("prometheus_client", reason="prometheus-client is a core dependency: pip install -e .")
    from sharewise.runtime.metrics import RunExporter

    exporter = RunExporter("127.0.0.1", 0)  # a /metrics endpoint answers any path with its text
    try:
        url = f"http://127.0.0.1:{exporter.port}"
        line = _collect_error(capsys, "--prometheus", url, "--start", "-5m", "--end", "now")
    finally:
        exporter.close()
    assert f"{url} is not a Prometheus server" in line and "HTTP 200 with text/plain" in line
    assert "not a job's /metrics port" in line


def test_an_empty_time_range_reads_as_times_not_unix_seconds(capsys):
    line = _collect_error(capsys, "--prometheus", "http://127.0.0.1:9", "--start", "2026-12-04T22:40:00Z",
                          "--end", "2026-12-04T21:10:00Z")
    assert "--start 2026-12-04T22:40:00Z is not before --end 2026-12-04T21:10:00Z (1 h 30 min after it)" in line
    assert not re.search(r"\d{9,}", line), line
    with pytest.raises(ConfigError, match=r"--start 2026-12-04T22:40:00.500Z .* \(the same time\)"):
        read_prometheus("http://127.0.0.1:9", 1796424000.5, 1796424000.5)


def test_times_and_durations_read_as_people_write_them():
    assert iso_time(1796424000.0) == "2026-12-04T22:40:00Z" and iso_time(0.25) == "1970-01-01T00:00:00.250Z"
    assert [duration(s) for s in (0.5, 42.5, 90, 3600, 5400, 86400 * 3)] == [
        "0.5 s", "42.5 s", "2 min", "1 h", "1 h 30 min", "3.0 days"]
