"""A user on another device than the one that measured the shipped data: ``SHAREWISE_CPU_MODEL`` reports the CPU
under another name; ``suggest``, ``predict``, ``recommend`` and ``evaluate`` say in one line that the workloads are
profiled on different devices and what to do, instead of an empty answer with a wrong reason; and the guides'
examples that profile on this device and combine it with ``reference`` pass under another CPU model name.

The fast tests use tiny literal tables: four partners profiled and paired on CPU ``Y``, a new workload profiled on
CPU ``X`` (or on GPU ``G``), and a small real XGBoost model trained on the partners' pairs.
"""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from test_docs import PAGES_WITH_EXAMPLES, REPO, run_page_examples, runnable_blocks
from test_predictor import FAST, _pair, run_cli

from sharewise.datasets.schema import validate_pairs, validate_profiles
from sharewise.datasets.store import Dataset
from sharewise.predictor import suggest_pairs, train_model
from sharewise.predictor.evaluation import unscored_device_note
from sharewise.predictor.stand_in import StandIn, with_stand_ins
from sharewise.predictor.suggest import candidate_stand_ins, nothing_to_suggest
from sharewise.profiler.device import CPU_MODEL_ENV, cpu_device_name, cpu_model

OTHER_CPU = "Intel(R) Xeon(R) Processor"
PARTNERS = ("p0", "p1", "p2", "p3")
BUSY = {"p0": 0.3, "p1": 0.5, "p2": 0.7, "p3": 0.9, "new": 0.6}


def _profile(workload: str, device: str, kind: str = "cpu", created: str = "2024-01-01T00:00:00") -> dict:
    i = int(workload[1:]) if workload[1:].isdigit() else 4
    step = 10.0 * (1 + i)
    return {
        "workload": workload, "family": workload, "batch_size": 8, "device_kind": kind, "device_name": device,
        "mode": "cpu" if kind == "cpu" else "timeslice", "host": "h", "torch_version": "2", "created_at": created,
        "iter_time_ms": step, "throughput": 1000.0 / step, "f_busy_frac": BUSY[workload],
        "f_flops_per_step": 1e9 * (i + 1), "f_kernels_per_step": 50.0 + i,
    }


def _tables(new_device: str = "X", new_kind: str = "cpu") -> tuple[pd.DataFrame, pd.DataFrame]:
    profiles = [_profile(w, "Y") for w in PARTNERS] + [_profile("new", new_device, new_kind)]
    pairs = [
        _pair(a, b, "Y", max(1.0, BUSY[a] + BUSY[b]), max(1.0, BUSY[a] + BUSY[b]) * 1.02)
        for i, a in enumerate(PARTNERS) for b in PARTNERS[i:]
    ]
    return validate_profiles(pd.DataFrame(profiles), "literal"), validate_pairs(pd.DataFrame(pairs), "literal")


@pytest.fixture(scope="module")
def model():
    profiles, pairs = _tables()
    return train_model(profiles, pairs, **FAST)


def _write(folder, profiles, pairs=None):
    ds = Dataset(folder)
    ds.write_profiles(profiles)
    if pairs is not None:
        ds.write_pairs(pairs)
    return str(ds.path)


@pytest.fixture()
def files(tmp_path, model):
    """The partners (folder ``shipped``), the new workload's profile on ``X`` (folder ``mine``), a saved model."""
    profiles, pairs = _tables()
    shipped = _write(tmp_path / "shipped", profiles[profiles["workload"] != "new"], pairs)
    mine = _write(tmp_path / "mine", profiles[profiles["workload"] == "new"])
    path = tmp_path / "model.json"
    model.save(path)
    return {"shipped": shipped, "mine": mine, "model": str(path)}


# ---- the device name ----------------------------------------------------------------------------------------
def test_the_cpu_model_can_be_reported_under_another_name(monkeypatch):
    monkeypatch.delenv(CPU_MODEL_ENV, raising=False)
    hardware = cpu_model()
    monkeypatch.setenv(CPU_MODEL_ENV, f"  {OTHER_CPU} ")
    assert cpu_model() == OTHER_CPU
    assert re.fullmatch(re.escape(OTHER_CPU) + r" \(\d+ cores\)", cpu_device_name())
    monkeypatch.setenv(CPU_MODEL_ENV, "   ")  # blank: the hardware's name
    assert cpu_model() == hardware


# ---- stand-ins ----------------------------------------------------------------------------------------------
def test_a_profile_from_a_device_of_the_same_kind_stands_in():
    profiles, _ = _tables()
    newer = {**_profile("p0", "Y2", created="2025-01-01T00:00:00"), "f_busy_frac": 0.31}
    gpu = _profile("p1", "G", kind="cuda")
    profiles = pd.concat([profiles, pd.DataFrame([newer, gpu])], ignore_index=True)
    out, stand_ins = with_stand_ins(profiles, [("p0", "X"), ("p0", "X"), ("p0", "Y"), ("new", "G")])
    # The newest same-kind profile stands in, once; p0 has its own on Y; a CPU profile never stands in on a GPU.
    assert stand_ins == [StandIn("p0", "X", "Y2")]
    row = out.iloc[-1]
    assert len(out) == len(profiles) + 1 and row["device_name"] == "X" and row["f_busy_frac"] == 0.31
    _, preferred = with_stand_ins(profiles, [("p0", "X")], prefer=["Y"])  # a model's training device first
    assert preferred == [StandIn("p0", "X", "Y")]


# ---- suggest ------------------------------------------------------------------------------------------------
def test_suggest_picks_pair_runs_on_the_new_workloads_device_with_partners_standing_in(model):
    profiles, pairs = _tables()
    picks = suggest_pairs(model, profiles, pairs, ["new"], budget=2)
    assert [(p.workload, p.rank, p.device_name, p.stand_in) for p in picks] == [
        ("new", 1, "X", "Y"), ("new", 2, "X", "Y")
    ]
    assert len({p.partner for p in picks}) == 2 and {p.partner for p in picks} <= set(PARTNERS)
    assert {s.workload for s in candidate_stand_ins(model, profiles, pairs, ["new"])} == set(PARTNERS)
    # A pair run measured on X (its row names X; p0 has no profile there): the refit joins p0's stand-in to it.
    measured = pd.concat([pairs, pd.DataFrame([_pair("new", "p0", "X", 1.3, 1.4)])], ignore_index=True)
    again = suggest_pairs(model, profiles, measured, ["new"], budget=4)
    assert len(again) == 3 and "p0" not in {p.partner for p in again}


def test_nothing_to_suggest_says_why_and_what_to_do(model):
    profiles, pairs = _tables(new_device="G", new_kind="cuda")
    assert suggest_pairs(model, profiles, pairs, ["new"], budget=2) == []
    why = nothing_to_suggest(profiles, pairs, ["new"], budget=2, out="runs/gpu")
    assert "measured already" not in why and "\n" not in why
    assert why.endswith("sharewise profile p0 p1 p2 p3 --device cuda --out runs/gpu")
    assert nothing_to_suggest(profiles, pairs, ["new"], budget=0) == "the budget is 0"
    assert nothing_to_suggest(profiles, pairs, ["p0"], against=["p1"]) == "every candidate pair is measured already"
    assert nothing_to_suggest(profiles, pairs[:0], ["new"]).startswith("no known partner")


def test_cli_suggest_notes_the_stand_ins_in_one_line(files, capsys):
    args = ["suggest", "--model", files["model"], "--data", files["shipped"], "--data", files["mine"]]
    code, out, err = run_cli([*args, "--workloads", "new", "--budget", "2"], capsys)
    assert code == 0, err
    notes = [line for line in out.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "stand in" in notes[0], out
    assert notes[0].endswith(f"run: sharewise profile p0 p1 p2 p3 --out {files['mine']}")
    code, out, err = run_cli([*args, "--workloads", "new", "--budget", "2", "--json"], capsys)
    result = json.loads(out)
    assert [s["stand_in"] for s in result["suggestions"]] == ["Y", "Y"] and len(result["notes"]) == 1
    # The partners profiled on X too: nothing stands in, and one line says the model has no pair on X.
    _write(files["mine"], pd.DataFrame([_profile(w, "X") for w in PARTNERS]))
    code, out, err = run_cli([*args, "--workloads", "new", "--budget", "2", "--json"], capsys)
    result = json.loads(out)
    assert [s["stand_in"] for s in result["suggestions"]] == [None, None]
    assert len(result["notes"]) == 1 and "no training pair" in result["notes"][0]


# ---- predict ------------------------------------------------------------------------------------------------
def test_cli_predict_across_devices_uses_a_stand_in_and_says_so(tmp_path, model, monkeypatch, capsys):
    monkeypatch.setenv(CPU_MODEL_ENV, OTHER_CPU)
    here = cpu_device_name()  # this machine, as the new workload's profile names it
    profiles, pairs = _tables(new_device=here)
    shipped = _write(tmp_path / "shipped", profiles[profiles["workload"] != "new"], pairs)
    mine = _write(tmp_path / "mine", profiles[profiles["workload"] == "new"])
    model.save(tmp_path / "m.json")
    args = ["predict", "--model", str(tmp_path / "m.json"), "--data", shipped, "--data", mine]
    code, out, err = run_cli([*args, "new", "p0", "--json"], capsys)
    assert code == 0, err
    result = json.loads(out)  # one prediction: on this machine's device, p0's profile from Y standing in
    assert result["device_name"] == here
    assert result["stand_ins"] == [{"workload": "p0", "device_name": here, "source": "Y"}]
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and warnings[0].endswith(f"run: sharewise profile p0 --out {mine}"), err
    code, out, err = run_cli([*args, "new", "p0", "--device", "Y", "--json"], capsys)
    assert code == 0 and json.loads(out)["stand_ins"] == [{"workload": "new", "device_name": "Y", "source": here}]
    monkeypatch.setenv(CPU_MODEL_ENV, "another machine")  # neither device is this machine's: both are shown
    code, out, err = run_cli([*args, "new", "p0", "--json"], capsys)
    assert code == 0 and [r["device_name"] for r in json.loads(out)] == sorted([here, "Y"])
    assert len([line for line in err.splitlines() if line.startswith("warning:")]) == 2


def test_cli_predict_names_the_command_where_nothing_can_stand_in(tmp_path, model, capsys):
    profiles, pairs = _tables(new_device="G", new_kind="cuda")
    data = _write(tmp_path / "ds", profiles, pairs)
    model.save(tmp_path / "m.json")
    code, out, err = run_cli(["predict", "--model", str(tmp_path / "m.json"), "--data", data, "new", "p0"], capsys)
    assert code == 2 and err.count("error:") == 1
    assert f"sharewise profile p0 --device cuda --out {data}" in " ".join(err.split())


# ---- recommend ----------------------------------------------------------------------------------------------
def test_recommend_says_which_device_lacks_which_workloads(tmp_path, model, capsys):
    profiles, pairs = _tables()
    data = _write(tmp_path / "ds", profiles, pairs)
    model.save(tmp_path / "m.json")
    queue = tmp_path / "queue.csv"
    queue.write_text("job_id,workload\nj1,new\nj2,p0\nj3,p1\n")
    args = ["recommend", "--model", str(tmp_path / "m.json"), "--data", data, "--queue", str(queue), "--gpus", "2"]
    code, out, err = run_cli(args, capsys)
    assert code == 2 and err.count("error:") == 1
    message = " ".join(err.split())
    # Neither device has all three: the plan's device is the one with most of them, Y, and new lacks it.
    assert "queued workload(s) new (profiled on 'X')" in message and "--out" in message
    code, out, err = run_cli([*args, "--device-name", "X"], capsys)
    assert code == 2 and f"sharewise profile p0 p1 --out {data}" in " ".join(err.split())
    both = _write(tmp_path / "both", pd.concat([profiles, pd.DataFrame([_profile("new", "Y")])]), pairs)
    code, out, err = run_cli([*args[:4], both, *args[5:]], capsys)
    assert code == 0, err  # Y, the one device with every queued workload
    assert "note: device 'Y'" in out


# ---- evaluate -----------------------------------------------------------------------------------------------
def test_evaluate_says_the_new_device_is_not_scored():
    profiles, pairs = _tables()
    note = unscored_device_note(profiles, pairs, out="runs/new")
    assert "'X', where no pair is measured" in note and "the scores are for 'Y' only" in note
    assert "sharewise pairs -w new,p0 --out runs/new" in note
    assert unscored_device_note(profiles[profiles["workload"] != "new"], pairs) is None


# ---- the guides, as a user on another CPU model runs them ----------------------------------------------------
#: Commands that measure on this machine: their rows carry this machine's device name.
_MEASURES = re.compile(r"\bsharewise\s+(profile|pairs|run|demo)\b")


def _measures_next_to_reference(page) -> bool:
    codes = [b.code for b in runnable_blocks(page.read_text(encoding="utf-8"), page)]
    return any(_MEASURES.search(c) for c in codes) and any("reference" in c for c in codes)


#: The pages whose examples measure on this machine and use the shipped data measured on another.
DEVICE_PAGES = [p for p in PAGES_WITH_EXAMPLES if _measures_next_to_reference(p)]


def test_the_pages_that_measure_next_to_the_shipped_data_include_the_pairs_guide():
    assert REPO / "docs" / "guides" / "pairs.md" in DEVICE_PAGES


@pytest.mark.slow
@pytest.mark.parametrize("page", DEVICE_PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_the_guides_examples_pass_on_another_cpu_model(page, tmp_path):
    outputs = run_page_examples(page, tmp_path, env={CPU_MODEL_ENV: OTHER_CPU})
    for output in outputs:
        assert "measured already" not in output, output[-3000:]
    if page.name == "pairs.md":
        assert any("stand in" in o and OTHER_CPU in o for o in outputs), outputs
