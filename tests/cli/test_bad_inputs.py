"""The bad-input table (issue 5): each bad file or argument, through the CLI, gives one line naming the file
and the problem, exit code 2, no traceback, and leaves the existing data exactly as it was."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from conftest import make_literal_dataset

from sharewise.cli import main

GOOD_PROFILES = "workload,family,f_flops,f_busy\nw0,f0,1.0,0.9\nw1,f1,2.0,0.5\n"
GOOD_PAIRS = "workload_a,workload_b,slowdown_a,slowdown_b\nw0,w1,1.5,1.9\n"


def _snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (temp leftovers excluded) with a hash of its bytes."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.name.startswith(".")
    }


def _write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.write_bytes if isinstance(text, bytes) else path.write_text)(text)
    return path


@pytest.fixture(scope="module")
def model_file(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("model")
    make_literal_dataset(base / "data")
    main(["train", str(base / "data"), "--out", str(base / "model.json")])
    return base / "model.json"


def _case_import_csv(tmp: Path, profiles: str | bytes, pairs: str = GOOD_PAIRS) -> tuple[list[str], str]:
    p = _write(tmp / "in" / "profiles.csv", profiles)
    q = _write(tmp / "in" / "pairs.csv", pairs)
    return ["import", "csv", "--profiles", str(p), "--pairs", str(q), "--out", str(tmp / "data")], "profiles.csv"


def _case_import_pairs(tmp: Path, pairs: str) -> tuple[list[str], str]:
    args, _ = _case_import_csv(tmp, GOOD_PROFILES, pairs)
    return args, "pairs.csv"


def _case_truncated_parquet(tmp: Path) -> tuple[list[str], str]:
    files = sorted((tmp / "data" / "pairs").glob("*.parquet"))
    data = files[0].read_bytes()
    files[0].write_bytes(data[: len(data) // 3])
    return ["show", str(tmp / "data")], files[0].name


def _case_wrong_dtype_parquet(tmp: Path) -> tuple[list[str], str]:
    import pandas as pd

    files = sorted((tmp / "data" / "profiles").glob("*.parquet"))
    df = pd.read_parquet(files[0])
    df["throughput"] = "fast"
    df.to_parquet(files[0])
    return ["train", str(tmp / "data"), "--out", str(tmp / "m.json")], files[0].name


def _case_missing_column_parquet(tmp: Path) -> tuple[list[str], str]:
    import pandas as pd

    files = sorted((tmp / "data" / "pairs").glob("*.parquet"))
    pd.read_parquet(files[0]).drop(columns=["slowdown_b"]).to_parquet(files[0])
    return ["evaluate", str(tmp / "data")], files[0].name


def _case_empty_dataset(tmp: Path) -> tuple[list[str], str]:
    (tmp / "empty" / "profiles").mkdir(parents=True)
    return ["train", str(tmp / "empty"), "--out", str(tmp / "m.json")], "empty"


def _case_trace(tmp: Path, body: str) -> tuple[list[str], str]:
    trace = _write(tmp / "trace.csv", "job_id,arrival_s,duration_s,gpus,workload\n" + body)
    return ["simulate", str(trace), "--data", str(tmp / "data"), "--gpus", "4", "--oracle"], "trace.csv"


CASES = {
    "malformed CSV (binary garbage)": lambda t: _case_import_csv(t, b"\x00\xff\xfe garbage \x00\n\x01,\x02"),
    "CSV missing the workload column": lambda t: _case_import_csv(t, "name,f_flops\nw0,1.0\nw1,2.0\n"),
    "CSV feature of the wrong type": lambda t: _case_import_csv(t, GOOD_PROFILES.replace("0.5", "lots")),
    "CSV NaN feature": lambda t: _case_import_csv(t, GOOD_PROFILES.replace("0.5", "nan")),
    "CSV infinite feature": lambda t: _case_import_csv(t, GOOD_PROFILES.replace("0.5", "inf")),
    "CSV negative slowdown": lambda t: _case_import_pairs(t, GOOD_PAIRS.replace("1.9", "-1.9")),
    "CSV pair of an unprofiled workload": lambda t: _case_import_pairs(t, GOOD_PAIRS.replace("w1", "w9")),
    "truncated Parquet": _case_truncated_parquet,
    "Parquet column of the wrong type": _case_wrong_dtype_parquet,
    "Parquet missing a column": _case_missing_column_parquet,
    "empty dataset": _case_empty_dataset,
    "unknown workload to profile": lambda t: (["profile", "no_such_model", "--out", str(t / "data")], "no_such_model"),
    "unknown workload to predict": lambda t: (
        ["predict", "--model", str(t / "model.json"), "--data", str(t / "data"), "w0", "zz"],
        "zz",
    ),
    "model of another schema version": lambda t: (_old_schema(t), "model.sidecar.json"),
    "trace with out-of-order times": lambda t: _case_trace(t, "a,100,60,1,w0\nb,50,60,1,w1\n"),
    "trace with a negative time": lambda t: _case_trace(t, "a,-5,60,1,w0\n"),
    "trace naming an unknown workload": lambda t: _case_trace(t, "a,0,60,1,w0\nb,5,60,1,nope\n"),
    "queue with a header and no jobs": lambda t: (
        ["recommend", "--model", str(t / "model.json"), "--data", str(t / "data"), "--gpus", "1",
         "--queue", str(_write(t / "queue.csv", "job_id,workload\n"))],
        "queue.csv: the queue has no jobs",
    ),
}


def _old_schema(tmp: Path) -> list[str]:
    sidecar = tmp / "model.sidecar.json"
    meta = json.loads(sidecar.read_text())
    meta["schema_version"] = -1
    sidecar.write_text(json.dumps(meta))
    return ["predict", "--model", str(tmp / "model.json"), "--data", str(tmp / "data"), "w0", "w1"]


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_gives_one_line_exit_2_and_keeps_data(case, tmp_path, model_file, capsys):
    make_literal_dataset(tmp_path / "data")
    for f in model_file.parent.glob("model*.json"):
        _write(tmp_path / f.name, f.read_bytes())
    args, needle = CASES[case](tmp_path)
    before = _snapshot(tmp_path / "data")
    with pytest.raises(SystemExit) as exc:
        main(args)
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    assert needle in lines[0], f"the message should name {needle!r}: {lines[0]}"
    assert _snapshot(tmp_path / "data") == before, "a failed command must not change existing data"
