"""The report page on a small literal dataset: figures, tables and a simulated JCT comparison."""

import json

import numpy as np
import pytest
from conftest import LITERAL_WORKLOADS, make_literal_dataset

from sharewise.cli import main
from sharewise.datasets.traces.synthetic import synthetic_trace


def test_synthetic_trace_is_seeded_and_valid():
    t1, t2 = synthetic_trace(["a", "b"], 50, 4, seed=3), synthetic_trace(["a", "b"], 50, 4, seed=3)
    for field in ("arrival", "duration", "gpus", "workload"):
        np.testing.assert_array_equal(getattr(t1, field), getattr(t2, field))
    assert (np.diff(t1.arrival) >= 0).all() and (t1.duration > 0).all()
    assert set(t1.gpus) <= {1, 2} and set(t1.workload) <= {"a", "b"}


def test_report_writes_page_and_figures(tmp_path):
    make_literal_dataset(tmp_path / "d")
    main(["report", str(tmp_path / "d"), "--out", str(tmp_path / "r"), "--gpus", "4", "--jobs", "40"])
    page = (tmp_path / "r" / "index.html").read_text()
    for name in ("heatmap_0.png", "predicted_vs_measured.png", "jct.png"):
        assert (tmp_path / "r" / name).stat().st_size > 1000
        assert name in page
    sim = json.loads((tmp_path / "r" / "simulation.json").read_text())
    assert sim["jobs"] == 40 and "sharewise" in sim["policies"] and "exclusive-fifo-strict" in sim["policies"]
    # The slowdown table under the heatmap: one header row naming both axes, then one row per workload.
    tables = _tables(page)
    matrix = tables[0]
    assert matrix["head"] == [["self \\ partner", *LITERAL_WORKLOADS]]
    assert [row[0] for row in matrix["body"]] == list(LITERAL_WORKLOADS)
    assert all(cell for row in matrix["body"] for cell in row)
    # What the policies of the simulated comparison see, said once.
    assert "policies see slowdowns predicted by models that never saw the workload" in page
    assert "predicted predictions" not in page


def _tables(page: str) -> list[dict]:
    """Return each HTML table of ``page`` as ``{"head": [[cell, ...], ...], "body": [[cell, ...], ...]}``."""
    from html.parser import HTMLParser

    class Tables(HTMLParser):
        def __init__(self):
            super().__init__()
            self.tables, self.part, self.cell = [], None, None

        def handle_starttag(self, tag, attrs):
            if tag == "table":
                self.tables.append({"head": [], "body": []})
            elif tag in ("thead", "tbody"):
                self.part = "head" if tag == "thead" else "body"
            elif tag == "tr":
                self.tables[-1][self.part].append([])
            elif tag in ("td", "th"):
                self.cell = ""

        def handle_endtag(self, tag):
            if tag in ("td", "th"):
                self.tables[-1][self.part][-1].append(self.cell.strip())
                self.cell = None

        def handle_data(self, data):
            if self.cell is not None:
                self.cell += data

    parser = Tables()
    parser.feed(page)
    return parser.tables


def test_heatmap_title_of_a_small_matrix_lies_inside_the_figure():
    import pandas as pd

    from sharewise.app.figures import heatmap_figure, pyplot

    title = "measured slowdown: Intel(R) Xeon(R) Processor (2 cores), mode cpu"
    matrix = pd.DataFrame([[1.3, 1.8], [1.1, 1.2]], index=["resnet18", "bert"], columns=["resnet18", "bert"])
    fig = heatmap_figure(matrix, title)
    try:
        fig.canvas.draw()
        box = fig.axes[0].title.get_window_extent()
        assert 0 <= box.x0 and box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height
        assert " ".join(fig.axes[0].get_title().split()) == title  # wrapped, every word kept
    finally:
        pyplot().close(fig)


def test_report_of_a_dataset_without_pairs_is_exit_2(tmp_path, capsys):
    ds = make_literal_dataset(tmp_path / "d")
    for f in ds.pairs_dir.glob("*.parquet"):
        f.unlink()
    with pytest.raises(SystemExit) as exc:
        main(["report", str(tmp_path / "d"), "--out", str(tmp_path / "r")])
    assert exc.value.code == 2 and "no pair measurements" in capsys.readouterr().err
