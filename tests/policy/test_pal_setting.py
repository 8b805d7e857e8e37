"""PAL's setting: its trace format, per-class variability, the artifact's policies, per-round re-placement and
sharewise's re-placement, on hand-sized cases checked by hand-written arithmetic, and on PAL's public data."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
from conftest import run_cli
from test_simulator import _trace

from sharewise.app.simulate import SimulationConfig, run_simulation
from sharewise.datasets.traces import detect_format, load_trace
from sharewise.datasets.traces.pal import pal_class_mapping, read_pal_csv
from sharewise.datasets.variability import GpuVariability, draw_factors, read_class_mapping, read_variability
from sharewise.engine.simulator import Cluster, simulate
from sharewise.engine.table import SlowdownTable
from sharewise.errors import ConfigError, DatasetError, TraceError
from sharewise.policy import event_driven_names, get_policy

ARTIFACT = ("packed-sticky-artifact", "packed-non-sticky", "pm-first-artifact", "pal-artifact")


def _run(name, trace, variability, *, per_node, cross=1.0, delay=0.0, round_s=100.0, policy=None):
    cluster = Cluster(
        variability.n_gpus, per_node, cross_node_slowdown=cross, preempt_delay_s=delay, variability=variability
    )
    truth = SlowdownTable.unshared(sorted(set(trace.workload)))
    return simulate(trace, policy or get_policy(name), truth, cluster=cluster, round_s=round_s, name=name)


# ---- the trace format -----------------------------------------------------------------------------------
def test_pal_trace_runs_iterations_at_the_models_iteration_time(tmp_path):
    path = tmp_path / "workload-x.csv"
    path.write_text(
        "job_id,num_gpus,submit_time,duration,model\n"
        "0,1,98,1000.0,vgg19\n"
        "1,4,50,200.0,GPT2\n"
        "2,2,120,10.0,resnet50\n"
    )
    assert detect_format(path) == "pal"
    trace = load_trace(path)
    # Sorted by submit time; seconds = iterations x iteration time (vgg19 0.3006 s, GPT2 3.5714, resnet50 0.1754).
    assert trace.arrival.tolist() == [50.0, 98.0, 120.0]
    assert trace.duration.tolist() == pytest.approx([200 * 3.5714, 1000 * 0.3006, 10 * 0.1754])
    assert trace.gpus.tolist() == [4, 1, 2] and trace.line.tolist() == [3, 2, 4]
    assert trace.workload.tolist() == ["gpt2", "vgg16", "resnet50"]  # our zoo's nearest workloads
    assert trace.format == "pal" and "vgg19 as vgg16" in trace.notes[0]
    mapping = pal_class_mapping()
    assert [mapping[m] for m in ("resnet50", "vgg19", "vgg16", "PointNet", "GPT2", "DCGAN", "BERT")] == [
        "classA", "classC", "classC", "classD", "classB", "classB", "classB"
    ]


def test_pal_trace_errors_name_the_line(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("job_id,num_gpus,submit_time,duration,model\n0,1,0,10,vgg19\n1,1,5,10,alexnet\n")
    with pytest.raises(TraceError, match=r"bad.csv:3: model 'alexnet' has no iteration time.*known models"):
        read_pal_csv(path)
    path.write_text("job_id,num_gpus,submit_time,duration,model\n0,0,0,10,vgg19\n")
    with pytest.raises(TraceError, match=r":2: column 'num_gpus' must be"):
        read_pal_csv(path)


# ---- variability: the draw, the table, the mapping ------------------------------------------------------
def test_factors_are_drawn_per_gpu_and_class_from_the_measurements(tmp_path):
    """Times 100, 200, 300 have median 200: factors 0.5, 1.0, 1.5. GPU g gets, per class, the factor of run
    ``Generator(seed).integers(0, 3, n)[g]``, the classes drawn one after the other from one generator."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "runs.csv").write_text("perf,uuid\n100,a\n200,b\n300,c\n")
    (tmp_path / "fast.csv").write_text("perf\n50\n50\n")
    (tmp_path / "profiles.json").write_text(json.dumps({"A": "m/runs.csv", "B": "m/runs.csv", "C": "fast.csv"}))
    var = read_variability(tmp_path / "profiles.json", 6, seed=7, class_of={"w": "A"})
    rng = np.random.default_rng(7)
    expected = np.array([0.5, 1.0, 1.5])
    assert var.classes == ("A", "B", "C")
    assert var.factors[0].tolist() == expected[rng.integers(0, 3, 6)].tolist()
    assert var.factors[1].tolist() == expected[rng.integers(0, 3, 6)].tolist()  # same file, its own draw
    assert var.factors[2].tolist() == [1.0] * 6
    assert not np.array_equal(var.factors[0], var.factors[1])
    assert np.array_equal(read_variability(tmp_path / "profiles.json", 6, seed=7).factors, var.factors)
    assert var.speeds()[0].tolist() == pytest.approx((1 / var.factors[0]).tolist())
    assert var.uniform().factors.tolist() == np.ones((3, 6)).tolist()
    one = read_variability(tmp_path / "m" / "runs.csv", 4, seed=7)  # one measurements file: one class
    assert one.classes == ("runs",) and one.class_ids(["anything"]).tolist() == [0]
    assert draw_factors({"A": np.array([100.0, 200.0, 300.0])}, 6, 7).tolist() == [var.factors[0].tolist()]
    legacy = draw_factors({"A": np.array([100.0, 200.0, 300.0])}, 6, 7, stream="mt19937")
    assert legacy[0].tolist() == expected[np.random.RandomState(7).randint(0, 3, 6)].tolist()


def test_a_per_gpu_table_and_a_class_mapping_file(tmp_path):
    (tmp_path / "var.csv").write_text(
        ",GPU_ID,Node_ID,PerfVar_classA,PerfVar_classB\n0,0,0,1.2,1.0\n1,1,0,0.9,1.1\n"
    )
    (tmp_path / "classes.csv").write_text("workload,class\nresnet50,classA\nbert,classB\n")
    var = read_variability(tmp_path / "var.csv", 4, class_of=read_class_mapping(tmp_path / "classes.csv"))
    assert var.classes == ("classA", "classB")
    assert var.factors.tolist() == [[1.2, 0.9, 1.2, 0.9], [1.0, 1.1, 1.0, 1.1]]  # 2 rows repeated for 4 GPUs
    assert var.class_ids(["bert", "resnet50"]).tolist() == [1, 0]
    with pytest.raises(ConfigError, match=r"no variability class for workload\(s\) \['vgg16'\].*--job-classes"):
        var.class_ids(["bert", "vgg16"])
    (tmp_path / "var.csv").write_text("PerfVar_classA\n1.0\n-2\n")
    with pytest.raises(DatasetError, match=r"var.csv:3: column 'PerfVar_classA' must be a positive factor"):
        read_variability(tmp_path / "var.csv", 2)
    with pytest.raises(DatasetError, match="does not exist"):
        read_variability(tmp_path / "none.json", 2)
    (tmp_path / "classes.csv").write_text("workload,class\nbert,classB\nbert,classA\n")
    with pytest.raises(DatasetError, match="classes.csv:3: workload 'bert' is mapped twice"):
        read_class_mapping(tmp_path / "classes.csv")


# ---- the artifact's policies and the simulator's re-placement, by hand ------------------------------------
def _two_nodes() -> GpuVariability:
    """Node 0: GPUs 0 (factor 1.0) and 1 (2.0); node 1: GPUs 2 (1.0) and 3 (1.25). One class."""
    return GpuVariability(("A",), np.array([[1.0, 2.0, 1.0, 1.25]]), {"a": "A"})


@pytest.mark.parametrize("delay", [0.0, 60.0])
def test_per_round_replacement_slowest_gpu_and_locality_hand_computed(delay):
    """Jobs j0 (1 GPU, 200 s) and j1 (2 GPUs, 600 s) arrive at 0; 100 s rounds; 1.5x across nodes.

    At 0 every policy puts j0 on GPU 0 (lowest factor, then lowest index; packed: first best fit) and j1 on
    node 1, GPUs 2-3: it runs at its slowest GPU's factor 1.25, rate 0.8. j0 ends at 200; j1 has 600 - 200 x
    0.8 = 440 s of work left. The round at 200 places j1 again:
    - PAL: node 1 (largest factor 1.25) beats GPUs 0 and 2 (1.0 x 1.5 across nodes): same GPUs, it keeps
      running, nothing paid or counted; ends at 200 + 440 / 0.8 = 750.
    - PM-First: the lowest factors, GPUs 0 and 2, across nodes: it migrates, rate 1.0 / 1.5; ends at
      200 + (440 + delay) x 1.5 = 860 (950 with a 60 s migration cost).
    - Packed-Non-Sticky: the first node that fits, node 0, GPUs 0-1: slowest factor 2.0, rate 0.5; ends at
      200 + (440 + delay) x 2 = 1,080 (1,200).
    - Packed-Sticky keeps j1 where it is: 750.
    Each round before that gives every job its GPUs back: no migration, no preemption.
    """
    trace = _trace([(0.0, 200.0, 1, "a"), (0.0, 600.0, 2, "a")])
    want = {
        "pal-artifact": (750.0, 0),
        "pm-first-artifact": (200 + (440 + delay) * 1.5, 1),
        "packed-non-sticky": (200 + (440 + delay) * 2.0, 1),
        "packed-sticky-artifact": (750.0, 0),
    }
    for name, (end, migrations) in want.items():
        r = _run(name, trace, _two_nodes(), per_node=2, cross=1.5, delay=delay)
        assert r.finish.tolist() == pytest.approx([200.0, end]), name
        assert (r.metrics["migrations"], r.metrics["preemptions"]) == (migrations, 0), name


def test_pal_places_the_most_sensitive_class_first_hand_computed():
    """Two GPUs on one node; class A runs 3x slower on GPU 1, class B runs at 1.0 on both. Job j0 (class B)
    and j1 (class A) arrive at 0, 100 s each. PAL and PM-First place class A first: j1 on GPU 0, j0 on GPU 1,
    both end at 100. Packed-Non-Sticky places in FIFO order: j0 on GPU 0, j1 on GPU 1 at 1/3; at the round
    at 100 j1 (100 - 100/3 left) moves to GPU 0 and ends at 100 + 66.67 = 166.67. Packed-Sticky keeps j1 on
    GPU 1: it ends at 300."""
    var = GpuVariability(("A", "B"), np.array([[1.0, 3.0], [1.0, 1.0]]), {"a": "A", "b": "B"})
    trace = _trace([(0.0, 100.0, 1, "b"), (0.0, 100.0, 1, "a")])
    for name, end in (("pal-artifact", 100.0), ("pm-first-artifact", 100.0), ("packed-non-sticky", 500 / 3),
                      ("packed-sticky-artifact", 300.0)):
        r = _run(name, trace, var, per_node=2)
        assert r.finish.tolist() == pytest.approx([100.0, end]), name


def test_fifo_is_strict_and_the_artifact_policies_never_share():
    """Four GPUs, one class, all factors 1.0. j0 (3 GPUs, 100 s) runs; j1 (2 GPUs) arrives at 10 and does not
    fit on the one free GPU; j2 (1 GPU) arrives at 20 and would fit, but FIFO stops at j1: j2 waits for the
    round after j0 ends (100), where j1 and j2 both start and end at 200 and 150."""
    var = GpuVariability(("A",), np.ones((1, 4)), {"a": "A"})
    trace = _trace([(0.0, 100.0, 3, "a"), (10.0, 100.0, 2, "a"), (20.0, 50.0, 1, "a")])
    for name in ARTIFACT:
        r = _run(name, trace, var, per_node=4)
        assert r.start.tolist() == [0.0, 100.0, 100.0], name
        assert r.finish.tolist() == pytest.approx([100.0, 200.0, 150.0]), name


def test_sharewise_replaces_a_job_onto_the_gpu_fast_for_its_class_hand_computed():
    """Two GPUs on one node; class A runs 3x slower on GPU 1, class B at 1.0 on both. j0 (class B, 100 s)
    starts at 0 on GPU 0. j1 (class A, 600 s) arrives at 10; GPU 1 is the only free one. With migration free
    sharewise re-places: j1 loses most on a bad GPU (600 x (3 - 1) s against 0 for j0), so j1 takes GPU 0 and
    j0 migrates to GPU 1 (90 s left at 1.0): j0 ends at 100, j1 at 610. Without re-placement (``replace=
    False``, or by default with a 60 s migration cost) j1 runs on GPU 1 at 1/3 and ends at 10 + 1,800."""
    var = GpuVariability(("A", "B"), np.array([[1.0, 3.0], [1.0, 1.0]]), {"a": "A", "b": "B"})
    trace = _trace([(0.0, 100.0, 1, "b"), (10.0, 600.0, 1, "a")])
    r = _run("sharewise", trace, var, per_node=2, round_s=None)
    assert r.finish.tolist() == pytest.approx([100.0, 610.0])
    assert (r.metrics["migrations"], r.metrics["preemptions"]) == (1, 0)
    plain = functools.partial(get_policy("sharewise"), replace=False)
    r = _run("sharewise", trace, var, per_node=2, round_s=None, policy=plain)
    assert r.finish.tolist() == pytest.approx([100.0, 1810.0]) and r.metrics["migrations"] == 0
    r = _run("sharewise", trace, var, per_node=2, round_s=None, delay=60.0)
    assert r.finish.tolist() == pytest.approx([100.0, 1810.0]) and r.metrics["migrations"] == 0


@pytest.mark.parametrize("name", ["pm-first", "pal", "sharewise"])
def test_event_driven_policies_place_by_the_speeds_for_the_jobs_class(name):
    """GPU 0 is 3x slow for class A, GPU 1 1.5x slow for class B. Class-blind (the geometric mean over
    classes) GPU 1 looks faster (0.82 against 0.58). j0 (class B, 500 s) and j1 (class A, 100 s) start at 0,
    the longer first: by its class, j0 takes GPU 0 (1.0 for B) and ends at 500, j1 GPU 1 (1.0 for A), 100;
    class-blind j0 would take GPU 1 (1.5x: 750) and j1 GPU 0 (3x: 300)."""
    var = GpuVariability(("A", "B"), np.array([[3.0, 1.0], [1.0, 1.5]]), {"a": "A", "b": "B"})
    r = _run(name, _trace([(0.0, 500.0, 1, "b"), (0.0, 100.0, 1, "a")]), var, per_node=2, round_s=None)
    assert r.finish.tolist() == pytest.approx([500.0, 100.0])
    assert name in event_driven_names() and not set(ARTIFACT) & set(event_driven_names())


def test_a_job_without_a_class_is_refused():
    var = GpuVariability(("A", "B"), np.ones((2, 2)), {"a": "A"})
    with pytest.raises(ConfigError, match=r"no variability class for workload\(s\) \['b'\]"):
        _run("pal-artifact", _trace([(0.0, 10.0, 1, "b")]), var, per_node=2)


# ---- the command: PAL's setting from files ----------------------------------------------------------------
def test_simulate_pal_setting_from_files(tmp_path, capsys):
    trace = tmp_path / "workload-1.csv"
    trace.write_text(
        "job_id,num_gpus,submit_time,duration,model\n0,1,0,1000,resnet50\n1,2,30,500,BERT\n2,1,60,100,PointNet\n"
    )
    table = tmp_path / "var.csv"
    table.write_text("PerfVar_classA,PerfVar_classB,PerfVar_classC,PerfVar_classD\n" + "1.0,1.0,1.0,1.0\n" * 4)
    config = SimulationConfig(
        trace=str(trace), data="none", n_gpus=4, gpus_per_node=2, pm_scores=str(table), cross_node_slowdown=1.7,
        round_s=360.0, policies=(*ARTIFACT, "sharewise"),
    )
    report = run_simulation(config)
    assert report.n_jobs == 3 and report.view == "oracle" and not report.observe
    assert any("no two jobs share" in n for n in report.notes)
    for r in report.results.values():
        # j0 starts at 0 (175.4 s); j1 (89.5 s on one node) and j2 (28.1 s) wait for the round at 360.
        assert r.start.tolist() == [0.0, 360.0, 360.0], r.policy
        assert r.finish.tolist() == pytest.approx([175.4, 449.5, 388.1]), r.policy
    argv = ["simulate", trace, "--data", "none", "--gpus", "4", "--gpus-per-node", "2", "--pm-scores", table,
            "--round-s", "360", "-p", "pal-artifact", "--json"]
    assert run_cli(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["policies"]["pal-artifact"]["migrations"] == 0
    classes = tmp_path / "classes.csv"
    classes.write_text("workload,class\nresnet50,classA\n")
    assert run_cli([*argv, "--job-classes", classes]) == 2
    assert "no variability class for workload(s) ['bert', 'pointnet']" in capsys.readouterr().err


# ---- PAL's public data (data/pal at the repository root) ----------------------------------------------------
def test_pal_public_traces_and_measurements(public_data):
    pal = public_data / "pal"
    var = read_variability(pal / "profiles.json", 64, class_of=pal_class_mapping())
    assert var.classes == ("classA", "classB", "classC", "classD") and var.factors.shape == (4, 64)
    assert np.array_equal(var.factors, read_variability(pal / "profiles.json", 64).factors)  # seeded
    assert not np.array_equal(var.factors[1], var.factors[2])  # B and C read BERT's runs, drawn apart
    assert 0.9 < var.factors.min() and var.factors.max() < 4.0
    for k in range(1, 9):
        trace = load_trace(pal / "workload-traces" / "philly" / f"workload-{k}.csv")
        assert len(trace) == 160 and trace.format == "pal" and trace.gpus.max() <= 64
        var.class_ids(trace.workload)  # every model has a class
    r = _run("pal-artifact", trace, var, per_node=4, cross=1.7, round_s=360.0)
    assert np.all(np.isfinite(r.finish)) and r.metrics["preemptions"] == 0
