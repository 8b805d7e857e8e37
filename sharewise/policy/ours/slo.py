"""The closed forms ``sharewise``'s rules are built of: SLO budget, slack, urgency limit, shared ends and bounds.

Times are seconds; ``work`` is a job's whole exclusive run time and ``remaining`` what it has left, both on a
speed-1.0 GPU; ``speed`` that of the job's GPUs (the slowest); ``ran`` the wall time since its first start (the
realized slowdown counts from there, waits after a preemption included). Every rule of the policy calls these,
compiled (numba) and in this order of operations, so a rule changes here and nowhere else. Examples, SLO 2.0:
a 1,000 s job that started 300 s ago on a speed-1 GPU has ``budget = 2 x 1000 - 300 = 1700`` s to end in.
"""

from __future__ import annotations

import numpy as np

from sharewise.engine.compiled import kernel


@kernel
def budget(slo, work, speed, ran):  # pragma: no cover - compiled
    """Wall seconds a job that started ``ran`` seconds ago may still run and end within the SLO:
    ``slo * work / speed - ran``."""
    return slo * work / speed - ran


@kernel
def joiner_budget(slo, work, e, speed, start, now):  # pragma: no cover - compiled
    """``budget`` of a job about to join GPUs of ``speed`` (``e`` exclusive seconds left there): one that never
    ran (``start`` NaN) has ``slo * e``, one preempted before what is left of its own."""
    if np.isnan(start):
        return slo * e
    return budget(slo, work, speed, now - start)


@kernel
def slack(slo, work, remaining, delay, speed, ran):  # pragma: no cover - compiled
    """Wall seconds a job may still wait and then run alone to its end (paying the restart cost ``delay``)
    within the SLO: ``(slo * work - remaining - delay) / speed - ran``."""
    return (slo * work - remaining - delay) / speed - ran


@kernel
def urgency_limit(slo, urgency, work):  # pragma: no cover - compiled
    """The slack (on a speed-1.0 GPU) below which a preempted job is urgent: ``urgency`` of its SLO
    allowance, ``urgency * (slo - 1) * work``."""
    return urgency * (slo - 1.0) * work


@kernel
def calm(slo, urgency):  # pragma: no cover - compiled
    """The realized slowdown a job keeps its urgency slack within: the SLO less the urgency limit per second
    of work (a paused multi-GPU job must stay within it: getting all its GPUs back can take long)."""
    return slo - urgency_limit(slo, urgency, 1.0)


@kernel
def shared_ends(e_a, e_b, s_a, s_b):  # pragma: no cover - compiled
    """``(C_a, C_b)``: when two jobs sharing from now until the first one ends, end. ``e`` are remaining
    exclusive times, ``s`` slowdowns next to each other; the one that ends first does so at ``s * e``, the
    other then runs alone for the work it has left. ``e_a=2, e_b=4, s_a=s_b=1.5`` gives ``(3.0, 5.0)``."""
    f_a = s_a * e_a
    f_b = s_b * e_b
    if f_a <= f_b:
        return f_a, f_a + e_b - f_a / s_b
    return f_b + e_a - f_b / s_a, f_b


@kernel
def end_bound(s, e, t):  # pragma: no cover - compiled
    """When a job (``e`` exclusive seconds left, slowdown ``s`` next to a partner that stays at most ``t``
    seconds) ends at the latest, whatever order the two end in: ``min(s e, e + t (1 - 1/s))``. The bound of a
    multi-GPU job's partners: it runs at its worst GPU's rate, so it may stay longer than one GPU's pair says."""
    return min(s * e, e + t * (1 - 1 / s))


def pair_constants(allowed: np.ndarray, slowdown: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per workload pair, flattened (``i * n + j``): may share, slowdown (1.0 where not), and the constants of
    ``shared_ends`` in closed form: if ``i`` ends first the pair's summed extra time (stretch) is
    ``e_i (2 q_ij - 1 - q_ij / q_ji)`` and ``j`` ends at ``e_j + e_i q_ij (1 - 1/q_ji)`` (``extra``).

    Example: ``q = [[1.5, 1.5], [1.5, 1.5]]`` gives stretch ``2 x 1.5 - 1 - 1 = 1.0`` and extra ``0.5`` per cell.
    """
    q = np.where(allowed, slowdown, 1.0)
    stretch = 2 * q - 1 - q / q.T
    extra = q * (1 - 1 / q.T)
    return tuple(np.ascontiguousarray(x).ravel() for x in (allowed, q, stretch, extra))
