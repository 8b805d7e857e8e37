"""Tests of the slowdown contract's rule: bounds read from a queue, and the split that keeps both bounds at p90 while
the pair's combined throughput is highest (``planner.contract``), on cases small enough to check by hand."""

from __future__ import annotations

import math

import pytest

from sharewise.errors import ConfigError
from sharewise.planner.contract import PROTECTED_SLOWDOWN, Bound, choose_split


def test_bounds_read_from_a_queue_cell():
    assert Bound.parse("") == Bound() and not Bound().bounded and str(Bound()) == "none"
    assert Bound.parse(float("nan")) == Bound()
    assert Bound.parse("1.3") == Bound(1.3) and str(Bound(1.3)) == "<= 1.3"
    assert Bound.parse("Protected") == Bound(PROTECTED_SLOWDOWN, protected=True)
    for bad in ("0.9", "fast"):
        with pytest.raises(ConfigError, match="maximum slowdown"):
            Bound.parse(bad)


# Three splits of one pair, by hand: a gets 30, 50 or 70 percent.
SPLITS = [30, 50, 70]
P50_A, P90_A = [2.4, 1.6, 1.2], [2.7, 1.8, 1.24]
P50_B, P90_B = [1.3, 1.6, 2.2], [1.4, 1.8, 2.6]


def test_a_protected_job_gets_the_split_that_keeps_it_within_its_bound():
    # Only 70:30 keeps a <= 1.25 at p90 (1.24); its throughput 1/1.2 + 1/2.2 = 1.288 > 1: it shares there.
    c = choose_split(SPLITS, P50_A, P90_A, P50_B, P90_B, Bound(PROTECTED_SLOWDOWN, protected=True))
    assert c.split == 70 and c.p90 == (1.24, 2.6)
    assert c.throughput == pytest.approx(1 / 1.2 + 1 / 2.2)
    assert "70:30 keeps a protected (<= 1.25) (p90 1.24)" in c.reason


def test_without_bounds_the_highest_throughput_wins_and_ties_go_to_the_middle():
    # Throughputs: 30:70 0.417 + 0.769 = 1.186, 50:50 1.25, 70:30 1.288: 70:30.
    assert choose_split(SPLITS, P50_A, P90_A, P50_B, P90_B).split == 70
    # Equal throughput at 30 and 50 and 70: the split nearest 50:50.
    assert choose_split(SPLITS, [1.5] * 3, [1.6] * 3, [1.5] * 3, [1.6] * 3).split == 50


def test_a_pair_no_split_can_bound_or_that_does_not_pay_is_declined_with_the_reason():
    both = Bound(1.25)
    c = choose_split(SPLITS, P50_A, P90_A, P50_B, P90_B, both, both)
    assert c.split is None and not c.shares and "no split keeps both bounds" in c.reason
    # Keeps the bounds (none) but 1/2.1 + 1/2.1 < 1: taking turns does more work.
    c = choose_split([50], [2.1], [2.3], [2.1], [2.3])
    assert c.split is None and "does not pay" in c.reason and c.throughput == pytest.approx(2 / 2.1)


def test_bad_input_is_one_clear_error():
    with pytest.raises(ConfigError, match="one prediction per split"):
        choose_split([50, 70], [1.2], [1.3], [1.2], [1.3])
    assert math.isinf(Bound().max_slowdown)
