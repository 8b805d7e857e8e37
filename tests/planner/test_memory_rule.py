"""The one memory rule of sharing (``deploy.plan.sharing_allowed``), which ``recommend`` and ``run`` both apply:
two jobs share a device only where their memory limits fit it together; an unknown limit or device memory holds
no pair back unless the rule is strict."""

from __future__ import annotations

import numpy as np

from sharewise.deploy.plan import MIB, WorkloadResources, memory_limit, sharing_allowed


def _peak_for(limit: int) -> float:
    """A peak whose limit (x 1.1 + 512 MiB, up to a whole MiB) is ``limit`` bytes exactly."""
    return (limit - 512 * MIB) / 1.1


def test_limits_that_fit_share_and_unknown_ones_only_where_the_rule_is_not_strict():
    resources = {w: WorkloadResources(p, None, None, None) for w, p in
                 (("a", _peak_for(6000 * MIB)), ("b", _peak_for(12000 * MIB)), ("c", None))}
    assert memory_limit(resources["a"].peak_memory_bytes) == 6000 * MIB
    device = 16000 * MIB
    allowed, unknown = sharing_allowed(resources, ["a", "b", "c"], device, strict=False)
    # a+a 12000 fits, a+b 18000 and b+b 24000 do not; c has no peak: not held back.
    assert allowed.tolist() == [[True, False, True], [False, False, True], [True, True, True]]
    assert unknown.tolist() == [[False, False, True], [False, False, True], [True, True, True]]
    strict, _ = sharing_allowed(resources, ["a", "b", "c"], device, strict=True)
    assert strict.tolist() == [[True, False, False], [False, False, False], [False, False, False]]
    for memory in (None, float("nan")):  # the device's memory unknown: nothing is held back, unless strict
        loose, unknown = sharing_allowed(resources, ["a", "b"], memory, strict=False)
        assert loose.all() and unknown.all()
        assert not sharing_allowed(resources, ["a", "b"], memory, strict=True)[0].any()
    assert np.array_equal(allowed, allowed.T)
