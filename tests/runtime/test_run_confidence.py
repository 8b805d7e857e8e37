"""``sharewise run`` learns and keeps an observed pair only where ``collect`` would (issue 52): the pairings of two
workloads are cut into windows, and the pair passes the one confidence rule (``profiler.confidence``) before the
policies see it or a row is written. Checked on the real world's own measurement code with step reports written
out by hand, so every rate and slowdown below is worked out on paper."""

from __future__ import annotations

import json

import pytest

from sharewise.profiler.confidence import CI_TARGET, REPEATS, judge
from sharewise.runtime.jobs import JobSpec
from sharewise.runtime.sitting import Sitting
from sharewise.runtime.slots import cpu_layout
from sharewise.runtime.world import Pairing, RealWorld, Segment, window_rates


def test_the_rule_wants_enough_windows_and_narrow_half_widths():
    # The rows: 1-2 trials with both slowdowns below 1 were written and learned; collect refuses them.
    assert judge([0.95, 0.77], [0.81, 0.98]) == "too short: 2 window(s) together, 3 needed"
    # Three steady windows: half-widths 0, a row.
    assert judge([2.0, 2.0, 2.0], [2.5, 2.5, 2.5]) == ""
    # mean 1.0, sd 0.1 over 3 windows: 4.303 x 0.1 / sqrt(3) = 24.8% > 5%.
    assert judge([0.9, 1.0, 1.1], [1.0, 1.0, 1.0]) == "too noisy: half-widths 24.8% and 0.0% over 3 windows, target 5%"
    assert (REPEATS, CI_TARGET) == (3, 0.05)  # collect's defaults: the same rule with the same numbers


def test_windows_hold_enough_steps_and_seconds():
    # 3 steps over 0.5 s (6/s), then from step 4 at 0.5 s: step 8 at 1.0 s (4 steps in 0.5 s, 8/s); step 9 is
    # the remainder.
    assert window_rates([(1, 0.0), (2, 0.2), (4, 0.5), (5, 0.7), (8, 1.0), (9, 1.1)], 3, 0.5) == [6.0, 8.0]


def test_the_sitting_pools_windows_of_both_orders_and_keeps_them():
    s = Sitting()
    s.add_windows("a", "b", [1.2, 1.3], [1.5, 1.6])
    s.add_windows("b", "a", [1.7], [1.1])  # b next to a 1.7, a next to b 1.1
    assert s.windows("a", "b") == ([1.2, 1.3, 1.1], [1.5, 1.6, 1.7])
    assert s.windows("b", "a") == ([1.7, 1.5, 1.6], [1.1, 1.2, 1.3])
    assert Sitting.from_json(json.loads(json.dumps(s.to_json()))).windows("a", "b") == s.windows("a", "b")


def _world(tmp_path, sitting: Sitting, got: list) -> RealWorld:
    """The real world of two jobs, workloads ``a`` and ``b``, alone at 50 steps/s each in this sitting."""
    specs = [JobSpec("x", "a", "a", 1000, "tiny"), JobSpec("y", "b", "b", 1000, "tiny")]
    for name in ("a", "b"):
        sitting.add_solo(name, 100, 2.0)
    return RealWorld(specs, [0.02, 0.02], [0.0, 0.0], cpu_layout(1), tmp_path, sitting,
                     on_pair=lambda a, b, values: got.append((a.name, b.name, values)))


def _pairing(seconds: float) -> Pairing:
    """x at 25 steps/s (slowdown 50 / 25 = 2.0) and y at 20 steps/s (2.5) together for ``seconds``."""
    pairing = Pairing(0, 1, 0.0)
    for j, step_s in ((0, 0.04), (1, 0.05)):
        records = [(k, k * step_s) for k in range(1, int(seconds / step_s) + 1)]
        pairing.segments[j] = Segment(0.0, frozenset({1 - j}), records, pairing)
    return pairing


def test_a_short_pairing_is_neither_learned_nor_written(tmp_path):
    """1.6 s together, both stepping from 0.05 s: x's 1.52 s hold two windows of 13 steps, y's 1.55 s three of
    10: two together, too short. The policies learn nothing and the run writes no row (the slowdowns are still
    pooled for --compare-sim's truth)."""
    got: list = []
    world = _world(tmp_path, Sitting(), got)
    world._finish_pairing(_pairing(1.6))
    assert world.observations() == []
    (a, b, values), = got
    assert (a, b) == ("a", "b") and values["refused"] == "too short: 2 window(s) together, 3 needed"
    assert world.sitting.pair("a", "b")[:2] == pytest.approx((2.0, 2.5))


def test_a_steady_pairing_is_learned_and_written_with_its_windows(tmp_path):
    """4 s together: x's windows hold 13 steps (0.52 s) and y's 10 (0.5 s), seven of each, every one at slowdown
    2.0 and 2.5: half-widths 0, so the policies learn (2.0, 2.5) while the pairing runs and again at its end,
    and the row says seven windows."""
    got: list = []
    world = _world(tmp_path, Sitting(), got)
    pairing = _pairing(4.0)
    world.pairings[frozenset((0, 1))] = pairing
    world._measure_pairings(4.0)  # while it runs: it passes already
    (early,) = world.observations()
    assert (early.a, early.b) == (0, 1) and (early.slowdown_a, early.slowdown_b) == pytest.approx((2.0, 2.5))
    world._finish_pairing(pairing)
    (done,) = world.observations()
    assert (done.slowdown_a, done.slowdown_b) == pytest.approx((2.0, 2.5))
    (_, _, values), = got
    assert values["refused"] == "" and values["trials"] == 7 and values["ci_a"] == pytest.approx(0.0, abs=1e-9)


def test_a_pairing_whose_pair_was_noisy_before_is_judged_with_those_windows(tmp_path):
    """Earlier pairings left windows at 0.95 and 0.77 (the issue's rows); a steady pairing at 2.0 next to them
    pools into a spread no narrow interval holds: refused as too noisy, learned by no policy, even early."""
    sitting = Sitting()
    sitting.add_windows("a", "b", [0.95, 0.77], [0.81, 0.98])
    got: list = []
    world = _world(tmp_path, sitting, got)
    pairing = _pairing(4.0)
    world.pairings[frozenset((0, 1))] = pairing
    world._measure_pairings(4.0)
    world._finish_pairing(pairing)
    assert world.observations() == []
    assert got[0][2]["refused"].startswith("too noisy: half-widths") and got[0][2]["trials"] == 9
