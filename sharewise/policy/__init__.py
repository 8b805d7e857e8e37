"""Policies that decide which jobs share a GPU, the cluster simulator that compares them, and ``recommend``.

Every policy is a pure function with one signature, ``policy(queue, cluster, table, now) -> list[Placement]``
(types in ``sharewise.policy.base``), living in its own module and named in ``REGISTRY``. Knobs go in as
keyword arguments, bound with ``functools.partial``; nothing dispatches on a policy's name.
"""

from __future__ import annotations

import importlib

from sharewise.policy.base import ClusterState, InvalidPlacementError, Placement, Policy, Queue

# name -> "module:attribute" inside this package, imported on first use.
REGISTRY: dict[str, str] = {
    "exclusive-fifo": "exclusive:exclusive_fifo",
    "exclusive-sjf": "exclusive:exclusive_sjf",
    "sjf-ffs": "sjf_ffs:sjf_ffs",
    "sjf-bsbf": "sjf_bsbf:sjf_bsbf",
    "pm-first": "pm_first:pm_first",
    "pal": "pal:pal",
    "sharewise": "sharewise:sharewise",
}

__all__ = [
    "REGISTRY",
    "ClusterState",
    "InvalidPlacementError",
    "Placement",
    "Policy",
    "Queue",
    "get_policy",
    "policy_names",
]


def policy_names() -> list[str]:
    """Return the registered policy names in registry order (baselines first, ours last)."""
    return list(REGISTRY)


def get_policy(name: str) -> Policy:
    """Return the policy function registered as ``name``; an unknown name lists the known ones."""
    from sharewise.errors import ConfigError

    if name not in REGISTRY:
        raise ConfigError(f"unknown policy {name!r}; known policies: {', '.join(sorted(REGISTRY))}")
    module_name, _, attr = REGISTRY[name].partition(":")
    module = importlib.import_module(f"sharewise.policy.{module_name}")
    return getattr(module, attr)
