"""The policies that decide which jobs share a GPU, one module each (ours a package laid out by mechanism).

Every policy is a pure function with one signature, ``policy(queue, cluster, table, now) -> list[Placement]``
or, for preemptive ones, a ``Decision`` (types in ``sharewise.engine.policy_types``), living in its own module and
named in ``REGISTRY``. Knobs go in as
keyword arguments, bound with ``functools.partial``; nothing dispatches on a policy's name.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

from sharewise.registry import Registry

if TYPE_CHECKING:
    from sharewise.engine.policy_types import Policy
    from sharewise.engine.table import SlowdownTable

#: The engine's policy types, named here too and loaded on first use (PEP 562): the CLI reads ``REGISTRY`` for
#: its help text without the engine (and numpy).
_ENGINE_NAMES = ("ClusterState", "Decision", "InvalidPlacementError", "Placement", "Policy", "Queue")

# name -> "module:attribute" inside this package, imported on first use; baselines first, ours last.
REGISTRY: Registry[Policy] = Registry(
    "policy",
    "sharewise.policy",
    {
        "exclusive-fifo-strict": "exclusive:exclusive_fifo_strict",
        "exclusive-fifo-backfill": "exclusive:exclusive_fifo_backfill",
        "exclusive-sjf": "exclusive:exclusive_sjf",
        "easy-backfill": "easy_backfill:easy_backfill",
        "tiresias": "tiresias:tiresias",
        "sjf-ffs": "sjf_ffs:sjf_ffs",
        "sjf-bsbf": "sjf_bsbf:sjf_bsbf",
        "packed-sticky": "packed_sticky:packed_sticky",
        "pm-first": "pm_first:pm_first",
        "pal": "pal:pal",
        "packed-sticky-artifact": "pal_artifact:packed_sticky_artifact",
        "packed-non-sticky": "pal_artifact:packed_non_sticky",
        "pm-first-artifact": "pal_artifact:pm_first_artifact",
        "pal-artifact": "pal_artifact:pal_artifact",
        "sharewise": "ours:sharewise",
    },
    signature="policy(queue, cluster, table, now) -> list[Placement]",
)

__all__ = [
    "REGISTRY",
    "ClusterState",
    "Decision",
    "InvalidPlacementError",
    "Placement",
    "Policy",
    "Queue",
    "describe",
    "event_driven_names",
    "get_policy",
    "policy_names",
    "warm_up",
]


def __getattr__(name: str):
    if name not in _ENGINE_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from sharewise import errors
    from sharewise.engine import policy_types

    value = getattr(errors if name == "InvalidPlacementError" else policy_types, name)
    globals()[name] = value  # later look-ups skip this function
    return value


def policy_names() -> list[str]:
    """Return the registered policy names in registry order (baselines first, ours last)."""
    return REGISTRY.names()


def event_driven_names() -> list[str]:
    """The registered policies defined for event-driven scheduling: all but those marked ``round_based`` (PAL's
    artifact's, which re-place every job at every 360 s round and run in PAL's setting)."""
    return [n for n in REGISTRY.names() if not getattr(REGISTRY.get(n), "round_based", False)]


def describe(name: str) -> str:
    """Return what the policy registered as ``name`` does, in one plain sentence (``sharewise policies``).

    A variant bound with ``functools.partial`` states its own ``summary``; a plain function's summary is the
    first paragraph of its docstring. Literal markup (````order````) is dropped: the text goes to a terminal.
    """
    policy = REGISTRY.get(name)
    text = getattr(policy, "summary", None)
    if text is None:
        doc = inspect.getdoc(getattr(policy, "func", policy)) or ""
        text = " ".join(doc.split("\n\n")[0].split())
    return text.replace("``", "")


def get_policy(name: str) -> Policy:
    """Return the policy function registered as ``name``; an unknown name lists the known ones."""
    return REGISTRY.get(name)


def warm_up(policy: Policy, n_gpus: int, table: SlowdownTable) -> None:
    """Call ``policy`` once on ``n_gpus`` idle GPUs with one job waiting (the result is dropped): its compiled
    kernels load, or compile on a first install, now rather than at its first call in a run whose clock runs."""
    from sharewise.engine.policy_types import ClusterState, Queue

    policy(Queue.of_new_jobs(1), ClusterState.idle(n_gpus, 1), table, 0.0)
