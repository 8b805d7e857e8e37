"""The policies' kernels run uncompiled: representative policy and simulator tests, again with
``NUMBA_DISABLE_JIT=1`` in a subprocess.

The compiled kernels are the one implementation of ``sharewise`` and of the baselines' free-GPU rules. With the JIT
off, numba hands back the plain Python functions: a debugger steps through them, coverage sees them, and a mistake
compiled code hides (an index past an array's end reads memory without a check) raises. The tests below touch
every kernel module: the free-GPU picks and orderings against their oracles, the scoring against the closed forms,
sharing, multi-GPU joins, the rescue, urgent restarts, SRPT and the reservation on hand-checked cases, the fastest
block and per-class speeds through whole simulations against the oracle, re-placement, and the simulator's
``advance``. A few, not the suite twice: uncompiled, a simulated call costs milliseconds instead of microseconds.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SELECTED = [
    "tests/policy/test_policy_ours.py::test_shared_completion_hand_computed",
    "tests/policy/test_policy_ours.py::test_sharewise_shares_within_the_slo_at_p90",
    "tests/policy/test_policy_ours.py::test_sharewise_counts_what_a_preempted_joiner_has_spent",
    "tests/policy/test_policy_ours.py::test_sharewise_checks_a_multi_gpu_joiner_over_all_its_residents",
    "tests/policy/test_policy_ours.py::test_sharewise_does_not_join_a_job_that_shares_another_of_its_gpus",
    "tests/policy/test_policy_ours.py::test_sharewise_preempts_a_long_job_for_a_short_one_while_the_slo_holds",
    "tests/policy/test_policy_ours.py::test_sharewise_pauses_a_sharing_job_once_the_pair_breaks_the_slo",
    "tests/policy/test_policy_ours.py::test_sharewise_restarts_a_preempted_job_before_its_slack_runs_out",
    "tests/policy/test_policy_kernels.py::test_sharewise_kernels_match_the_closed_forms[0]",
    "tests/policy/test_policy_kernels.py::test_compiled_orderings_are_numpys[1]",
    "tests/policy/test_policy_kernels.py::test_compiled_free_gpu_pick_is_the_python_rule[5]",
    "tests/policy/test_policy_kernels.py::test_compiled_fastest_block_is_pals_rule[3]",
    "tests/policy/test_policy_kernels.py::test_urgent_restarts_take_victims_by_the_oracles_rule[7]",
    "tests/policy/test_policy_kernels.py::test_srpt_preempts_the_victims_the_oracle_takes[17]",
    "tests/policy/test_policy_kernels.py::test_the_reservation_places_as_the_oracle[2]",
    "tests/policy/test_policy_ours.py::test_a_large_waiting_job_is_not_delayed_by_a_pair",
    "tests/engine/test_simulator.py::test_sharewise_pauses_a_long_job_for_a_short_one_hand_computed",
    "tests/engine/test_simulator.py::test_sharewise_rescues_the_slo_once_a_shared_pair_is_measured_hand_computed",
    # A whole simulation is slow uncompiled: one case of the uniform cluster and of each kind of varied one.
    "tests/engine/test_simulator.py::test_sharewise_in_one_kernel_schedules_as_the_general_path[0]",
    *(f"tests/engine/test_simulator.py::test_sharewise_in_one_kernel_schedules_as_the_oracle_where_placements_differ[{k}-0]"
      for k in ("speeds", "cross-node", "classes")),
    "tests/policy/test_pal_setting.py::test_sharewise_replaces_a_job_onto_the_gpu_fast_for_its_class_hand_computed",
]


def test_policy_tests_pass_with_the_kernels_uncompiled():
    env = {**os.environ, "NUMBA_DISABLE_JIT": "1"}
    check = ("import types; from sharewise.policy.ours.placement import place_kernel; "
             "assert isinstance(place_kernel, types.FunctionType), 'the JIT is on'")
    subprocess.run([sys.executable, "-c", check], cwd=REPO, env=env, check=True, timeout=120)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SELECTED],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    passed = re.search(r"(\d+) passed", proc.stdout)
    assert passed and int(passed.group(1)) >= len(SELECTED), proc.stdout[-2000:]  # none skipped or deselected
