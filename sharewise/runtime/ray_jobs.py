"""The jobs of a physical run as Ray actors: each job is an actor pinned to its slots by a custom resource.

A slot is the Ray resource ``sharewise_slot_<i>`` with capacity 2 (two jobs share a slot at most), held by
the node that has it: a job's actor asks for one unit of each of its slots, so Ray places it on that node,
and there the actor runs the job as a local process (``jobs.LocalJob``) pinned to the slot's device or
cores, pauses, resumes and kills it, and returns its step reports. The driver runs the same scheduling loop;
Ray only places the actors (no scheduler of our own across machines). Without ``--address`` a local Ray is
started with one resource per local slot. On a cluster, start each node with its slots, numbered across the
cluster, e.g. a node with GPUs 0-3 of slots 4-7::

    ray start --address HEAD:6379 --resources '{"sharewise_slot_4": 2, "sharewise_slot_5": 2, ...}'

A node's slots map to its local devices in order (its lowest-numbered slot is its first GPU, or its first
core set). Step times are the node's clock; the driver reads rates, not absolute times, from them.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import replace
from pathlib import Path

from sharewise.errors import ConfigError
from sharewise.profiler.executors.ray import import_ray
from sharewise.runtime.jobs import Exit, JobSpec
from sharewise.runtime.slots import Layout

SLOT_RESOURCE = "sharewise_slot_{}"
#: Seconds Ray may take to place and start a job's actor before the run gives up with the reason.
PLACE_TIMEOUT_S = 120.0
_SLOT = re.compile(r"^sharewise_slot_(\d+)$")


class JobActor:
    """The Ray actor of one job: a ``LocalJob`` on the slots this node holds."""

    def start(self, spec: JobSpec, slots: list[int], start_step: int, progress: str, log: str, device: str,
              mode: str, extra_env: dict[str, str]) -> None:
        import ray

        from sharewise.runtime.jobs import LocalJob
        from sharewise.runtime.slots import layout as make_layout

        node = ray.get_runtime_context().get_node_id()
        mine = sorted(int(m.group(1)) for info in ray.nodes() if info.get("NodeID") == node
                      for key in info.get("Resources", {}) if (m := _SLOT.match(key)))
        local = [mine.index(s) for s in slots]
        lay = make_layout(device, len(mine) if device == "cpu" else None, None if device == "cpu" else mode)
        folder = Path(progress).parent
        if not folder.is_dir():  # another machine than the driver's: keep the files on this node
            folder = Path(tempfile.mkdtemp(prefix="sharewise-job-"))
            progress, log = str(folder / Path(progress).name), str(folder / Path(log).name)
        self.job = LocalJob(spec, lay, local, start_step, progress, log, extra_env)

    def poll(self) -> tuple[list[tuple[int, float]], Exit | None, int | None]:
        records = self.job.poll()
        ended = None if self.job.paused else self.job.exit()
        return records, ended, self.job.own_total

    def pause(self) -> None:
        self.job.pause()

    def resume(self) -> None:
        self.job.resume()

    def kill(self) -> None:
        self.job.kill()


class RayJob:
    """The driver's handle of a job's actor, with the interface of ``LocalJob`` the real world uses."""

    def __init__(self, ray, actor, start_step: int) -> None:
        self.ray, self.actor = ray, actor
        self.start_step = start_step
        self.paused = False
        self._exit: Exit | None = None
        self.own_total: int | None = None  # the command's own total steps, read from its output on its node

    def poll(self) -> list[tuple[int, float]]:
        if self._exit is not None:
            return []
        records, ended, self.own_total = self.ray.get(self.actor.poll.remote())
        self._exit = ended
        return records

    def exit(self) -> Exit | None:
        return self._exit

    def pause(self) -> None:
        self.ray.get(self.actor.pause.remote())
        self.paused = True

    def resume(self) -> None:
        self.ray.get(self.actor.resume.remote())
        self.paused = False

    def kill(self) -> None:
        try:
            self.ray.get(self.actor.kill.remote(), timeout=30)
        except Exception:  # the actor or its node is gone: nothing left to kill there
            pass
        try:
            self.ray.kill(self.actor)
        except Exception:  # already gone
            pass


class RayLauncher:
    """Starts each job as a ``JobActor`` on the node holding its slots (the real world's ``launcher``).

    ``address``: an existing cluster whose nodes advertise ``sharewise_slot_<i>`` (see the module docstring);
    ``None`` starts a local Ray with one such resource per slot of ``layout`` and shuts it down in ``close``.
    """

    def __init__(self, layout: Layout, address: str | None = None, env: dict[str, str] | None = None) -> None:
        ray = self.ray = import_ray()
        self.layout = layout
        self.env = dict(env or {})
        self.own = False
        if not ray.is_initialized():
            if address:
                try:
                    ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
                except Exception as exc:
                    reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                    raise ConfigError(f"cannot join the Ray cluster at {address!r}: {reason}") from None
            else:
                resources = {SLOT_RESOURCE.format(i): 2 for i in range(layout.n_slots)}
                ray.init(num_cpus=max(2, 2 * layout.n_slots), resources=resources, include_dashboard=False,
                         log_to_driver=False, configure_logging=False)
                self.own = True
        have = {int(m.group(1)) for key in ray.cluster_resources() if (m := _SLOT.match(key))}
        missing = [i for i in range(layout.n_slots) if i not in have]
        if missing:
            self.close()
            raise ConfigError(
                f"the Ray cluster advertises no resource {SLOT_RESOURCE.format(missing[0])!r}: start each node with "
                "its slots, e.g. ray start --resources '{\"sharewise_slot_0\": 2}' (see sharewise.runtime.ray_jobs)"
            )
        self.actor_cls = ray.remote(num_cpus=0)(JobActor)
        self.actors = []

    def __call__(self, spec: JobSpec, slots: list[int], start_step: int, progress: Path, log: Path) -> RayJob:
        resources = {SLOT_RESOURCE.format(s): 1 for s in slots}
        actor = self.actor_cls.options(resources=resources).remote()
        try:
            self.ray.get(actor.start.remote(spec, slots, start_step, str(progress), str(log), self.layout.device,
                                            self.layout.mode, self.env), timeout=PLACE_TIMEOUT_S)
        except self.ray.exceptions.GetTimeoutError:
            self.ray.kill(actor)
            raise ConfigError(
                f"Ray placed no actor for job {spec.job_id!r} on slot(s) {slots} within {PLACE_TIMEOUT_S:.0f} s: no "
                f"node advertises {SLOT_RESOURCE.format(slots[0])!r} with room for one more job"
            ) from None
        self.actors.append(actor)
        return RayJob(self.ray, actor, start_step)

    def close(self) -> None:
        for actor in self.actors:
            try:
                self.ray.kill(actor)
            except Exception:  # already gone
                pass
        self.actors = []
        if self.own and self.ray.is_initialized():
            self.ray.shutdown()
            self.own = False


def cluster_layout(local: Layout, address: str | None) -> Layout:
    """The layout of a run on a Ray cluster: as many slots as the cluster advertises (else the local ones)."""
    if address is None:
        return local
    ray = import_ray()
    if not ray.is_initialized():
        return local
    have = sorted(int(m.group(1)) for key in ray.cluster_resources() if (m := _SLOT.match(key)))
    if not have:
        return local
    slots = tuple(replace(local.slots[0], index=i) for i in range(len(have)))
    return replace(local, slots=slots)
