"""Deployable pairing plans: the neutral plan of ``recommend`` and the emitters that turn it into a stack's files.

Every emitter is a module of this package exposing ``EMITTER``, an ``Emitter`` with one signature:
``emit(plan: DeployPlan) -> str`` (the text of the file). ``plan`` is the neutral JSON every other format is
made from (``sharewise.deploy.plan``); the others read only that plan. An emitter that needs the node of
every GPU (Slurm's ``-w``, HAMi's node selector) says so with ``needs_node``, and ``render`` refuses a plan
without them before the emitter runs. Adding a stack is its module plus one line in ``EMITTERS``.

Example::

    text = render(deploy_plan, "slurm")     # one sbatch line per job
    EMITTERS.choices()                      # "plan | k8s-dra | hami | slurm | ray" (CLI help)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sharewise.errors import ConfigError
from sharewise.registry import Registry


@dataclass(frozen=True)
class Emitter:
    """One deployment format: its name, a one-line summary, the file suffix, and how to write a plan in it
    (``emit(plan) -> text``, ``plan`` a ``deploy.plan.DeployPlan``: named, not imported, since that module
    declares its own emitter with this class)."""

    name: str
    summary: str
    suffix: str
    emit: Callable[..., str]
    needs_node: bool = False


EMITTERS: Registry[Emitter] = Registry(
    "emitter",
    "sharewise.deploy",
    {
        "plan": "plan:EMITTER",
        "k8s-dra": "k8s_dra:EMITTER",
        "hami": "hami:EMITTER",
        "slurm": "slurm:EMITTER",
        "ray": "ray:EMITTER",
    },
    signature="Emitter(name, summary, suffix, emit(plan: DeployPlan) -> str, needs_node)",
)


def render(plan, name: str) -> str:
    """Return ``plan`` (a ``deploy.plan.DeployPlan``) written in format ``name``; ``ConfigError`` if that format
    needs a node the plan lacks."""
    emitter = EMITTERS.get(EMITTERS.check(name))
    if emitter.needs_node:
        for placement in plan.placements:
            for device in placement.devices:
                if not device.node:
                    raise ConfigError(
                        f"{name}: GPU {device.gpu!r} ({device.source}) has no node; {name} needs the node of "
                        "every GPU it places jobs on: add a 'node' column to the cluster CSV, or give "
                        "--node NAME with --gpus N"
                    )
    return emitter.emit(plan)


__all__ = ["EMITTERS", "Emitter", "render"]
