"""The sharing knob: how much of a shared device each job of a pair may take, one code path per sharing mode.

A pair shares a device under a **split**, the share of job a (the other job takes the rest, ``Split(0.7)`` is
70:30). Each sharing mode enforces it its own way, behind one interface (``ShareKnob``):

- ``mps`` (NVIDIA MPS): each client's active thread percentage, ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``, set in the
  process's environment before it creates its CUDA context (MPS reads it then, and never again: a running worker
  cannot change it, so a pair at a new split starts new workers). HAMi's ``nvidia.com/gpucores`` and Slurm's
  ``mps:N`` are the same number in their stacks' forms.
- ``cpu`` and ``cpu-partition``: a CPU quota per job through the cgroup CPU controller, ``cpu.max`` where the
  machine mounts cgroup v2, ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` where it mounts v1: a job given share
  ``s`` of ``n`` cores may run ``s * n`` cores' worth of time per period. The quota applies to a running process
  (its pid moves into the job's cgroup), so warm workers keep running across splits.
- ``timeslice``: no knob. CUDA's time-slicing gives every context equal slices whatever anyone asks
  (KAI-Scheduler #274 reports exactly this), so a split cannot be enforced there; asking for one is an error.

``knob_for(mode).check()`` says, before anything runs, what is missing where the knob cannot be used (no cgroup
CPU controller mounted, not writable, no CUDA): one ``KnobError`` naming it and how to fix it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sharewise.errors import ConfigError

#: Where the cgroup hierarchies are mounted on Linux.
CGROUP_ROOT = Path("/sys/fs/cgroup")
#: The CFS period sharewise writes with a quota (the kernel's default, 100 ms).
PERIOD_US = 100_000
#: The environment variable MPS reads each client's share from, in percent.
MPS_THREADS = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
#: Shares are whole percents between these (a 0% or 100% job is not sharing).
MIN_PERCENT, MAX_PERCENT = 5, 95


class KnobError(ConfigError):
    """A split that the machine or the sharing mode cannot enforce; the message names what is missing."""


@dataclass(frozen=True)
class Split:
    """The shares of one pair's device: job a takes ``share_a`` (a fraction), job b the rest.

    ``Split.parse("70:30")`` is ``Split(0.7)``; ``str(Split(0.7))`` is ``"70:30"``.
    """

    share_a: float

    def __post_init__(self) -> None:
        percent = self.share_a * 100
        if not (MIN_PERCENT <= percent <= MAX_PERCENT) or abs(percent - round(percent)) > 1e-6:
            raise ConfigError(
                f"a split gives each job a whole percent between {MIN_PERCENT} and {MAX_PERCENT}, got "
                f"{percent:g}% for job a; write it as A:B with A + B = 100, e.g. 70:30"
            )

    @property
    def share_b(self) -> float:
        return round(1.0 - self.share_a, 2)

    @property
    def percent_a(self) -> int:
        return int(round(self.share_a * 100))

    @property
    def percent_b(self) -> int:
        return 100 - self.percent_a

    def swapped(self) -> Split:
        """The same split seen from job b: ``Split(0.7).swapped()`` is ``Split(0.3)``."""
        return Split(self.share_b)

    def __str__(self) -> str:
        return f"{self.percent_a}:{self.percent_b}"

    @classmethod
    def parse(cls, text: str) -> Split:
        """Read ``"70:30"`` (or ``"70"``, job a's percent); anything else is a ``ConfigError`` with an example."""
        m = re.fullmatch(r"\s*(\d+)\s*(?::\s*(\d+)\s*)?", str(text))
        if not m:
            raise ConfigError(f"a split is written A:B in percent, e.g. 70:30, got {text!r}")
        a = int(m.group(1))
        if m.group(2) is not None and a + int(m.group(2)) != 100:
            raise ConfigError(f"the two shares of a split add up to 100, got {text!r} ({a} + {m.group(2)})")
        return cls(a / 100.0)


def parse_splits(values: Sequence[str]) -> tuple[Split, ...]:
    """Read several splits (``--split 70:30 --split 50:50``), in order, without repeats."""
    out: list[Split] = []
    for v in values:
        for part in str(v).split(","):
            if part.strip():
                s = Split.parse(part)
                if s not in out:
                    out.append(s)
    return tuple(out)


class ShareKnob:
    """How one sharing mode enforces a job's share. ``check`` before anything runs; ``environment(share)`` for a
    process about to start under the knob; ``apply(pid, share)`` / ``release(pid)`` for a running one."""

    mode: str = ""
    #: What the knob is, in the words of the mode's stack (for messages and plans).
    what: str = ""
    #: Whether the share can change on a running process (else a new split needs new processes).
    live: bool = False

    def check(self) -> None:
        """Raise ``KnobError`` naming what is missing where the knob cannot be used on this machine."""

    def environment(self, share: float) -> dict[str, str]:
        """Environment variables a process started under ``share`` needs (nothing for a live knob)."""
        return {}

    def apply(self, pid: int, share: float) -> None:
        """Limit the running process ``pid`` to ``share`` (a live knob only)."""

    def release(self, pid: int) -> None:
        """Lift the limit on ``pid`` (it runs unrestricted again)."""

    def close(self) -> None:
        """Remove whatever the knob created on the machine (cgroups); idempotent."""


class NoKnob(ShareKnob):
    """``timeslice``: CUDA's time slices are equal whatever is asked, so no split can be enforced."""

    what = "none (equal time slices)"

    def __init__(self, mode: str) -> None:
        self.mode = mode

    def check(self) -> None:
        raise KnobError(
            f"the {self.mode!r} sharing mode has no knob: CUDA time-slicing gives every context equal slices "
            "whatever share is asked; measure splits with --mode mps on a GPU, or cpu / cpu-partition on a CPU"
        )


class MpsThreads(ShareKnob):
    """``mps``: each client's ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``, read by MPS when the client creates its
    context; a running client keeps its percentage (``live`` is False)."""

    mode = "mps"
    what = MPS_THREADS

    def environment(self, share: float) -> dict[str, str]:
        return {MPS_THREADS: str(percent_of(share))}


class CpuQuota(ShareKnob):
    """``cpu`` / ``cpu-partition``: a CFS quota per job in a cgroup of its own under ``sharewise-<pid>``.

    ``cores`` is the number of cores the pair shares (its quota is ``share * cores`` cores' worth per period).
    Where the machine mounts cgroup v2 the controller file is ``cpu.max`` (``"QUOTA PERIOD"``); with v1,
    ``cpu.cfs_quota_us`` and ``cpu.cfs_period_us`` in the ``cpu`` hierarchy.
    """

    what = "cgroup CPU quota"
    live = True

    def __init__(self, mode: str, cores: int, root: Path = CGROUP_ROOT) -> None:
        self.mode = mode
        self.cores = max(1, int(cores))
        self.root = Path(root)
        self._parent: Path | None = None
        self._groups: dict[int, Path] = {}

    # ---- where the controller is -------------------------------------------------------------------
    def controller(self) -> tuple[str, Path]:
        """Return ``("v2", dir)`` or ``("v1", dir)``: the hierarchy holding the CPU controller, or raise."""
        v2 = self.root / "cgroup.controllers"
        if v2.is_file() and "cpu" in v2.read_text().split():
            return "v2", self.root
        v1 = self.root / "cpu"
        if (v1 / "cpu.cfs_quota_us").is_file():
            return "v1", v1
        raise KnobError(
            f"no cgroup CPU controller under {self.root}: neither cgroup v2 with 'cpu' in cgroup.controllers nor "
            f"v1's {v1}/cpu.cfs_quota_us; a CPU split needs one (mount it, or run where it is mounted), or run "
            "without --split"
        )

    def check(self) -> None:
        version, where = self.controller()
        made = self._parent is None  # a check alone leaves nothing behind: the parent it made goes with it
        parent = self._ensure_parent(where)
        probe = parent / "check"
        try:
            probe.mkdir(exist_ok=True)
            self._write_quota(version, probe, 0.5)
        except OSError as exc:
            raise KnobError(
                f"cannot write the cgroup CPU controller ({version}) at {where}: {exc.strerror or exc}; a CPU split "
                "needs write access to it (run as root, or delegate a cgroup subtree to this user), or run without "
                "--split"
            ) from exc
        finally:
            _rmdir(probe)
            if made and not self._groups:
                _rmdir(parent)
                self._parent = None

    def _ensure_parent(self, where: Path) -> Path:
        if self._parent is None:
            parent = where / f"sharewise-{os.getpid()}"
            try:
                parent.mkdir(exist_ok=True)
                if (where / "cgroup.subtree_control").is_file():  # v2: let the children use the controller
                    _write(where / "cgroup.subtree_control", "+cpu", tolerate=True)
                    _write(parent / "cgroup.subtree_control", "+cpu", tolerate=True)
            except OSError as exc:
                raise KnobError(
                    f"cannot create a cgroup under {where}: {exc.strerror or exc}; a CPU split needs write access to "
                    "the cgroup CPU controller (run as root), or run without --split"
                ) from exc
            self._parent = parent
        return self._parent

    def _write_quota(self, version: str, group: Path, share: float) -> None:
        quota = max(1000, int(round(share * self.cores * PERIOD_US)))
        if version == "v2":
            _write(group / "cpu.max", f"{quota} {PERIOD_US}")
        else:
            _write(group / "cpu.cfs_period_us", str(PERIOD_US))
            _write(group / "cpu.cfs_quota_us", str(quota))

    # ---- per process -------------------------------------------------------------------------------
    def apply(self, pid: int, share: float) -> None:
        version, where = self.controller()
        parent = self._ensure_parent(where)
        group = self._groups.get(pid)
        if group is None:
            group = parent / f"job-{pid}"
            group.mkdir(exist_ok=True)
            self._groups[pid] = group
        self._write_quota(version, group, share)
        # Every thread of the process moves: v2's cgroup.procs moves the process, v1's tasks one thread each.
        if version == "v2":
            _write(group / "cgroup.procs", str(pid))
        else:
            for tid in _threads(pid):
                _write(group / "tasks", str(tid), tolerate=True)

    def quota_of(self, pid: int) -> float | None:
        """The share ``pid`` runs under (``None`` when the knob does not limit it): read back from the cgroup."""
        group = self._groups.get(pid)
        if group is None:
            return None
        version, _ = self.controller()
        if version == "v2":
            quota, period = (group / "cpu.max").read_text().split()
            return None if quota == "max" else int(quota) / int(period) / self.cores
        quota = int((group / "cpu.cfs_quota_us").read_text())
        return None if quota < 0 else quota / int((group / "cpu.cfs_period_us").read_text()) / self.cores

    def throttled(self, pid: int) -> int:
        """How many periods the kernel throttled ``pid``'s cgroup (``cpu.stat``): the quota at work."""
        group = self._groups.get(pid)
        if group is None:
            return 0
        stat = dict(line.split() for line in (group / "cpu.stat").read_text().splitlines() if line.strip())
        return int(stat.get("nr_throttled", 0))

    def release(self, pid: int) -> None:
        group = self._groups.pop(pid, None)
        if group is None:
            return
        version, where = self.controller()
        target = where / ("cgroup.procs" if version == "v2" else "tasks")
        # Back to the hierarchy's root (unlimited); a process that already exited has nothing to move.
        for tid in ([pid] if version == "v2" else _threads(pid)):
            _write(target, str(tid), tolerate=True)
        _rmdir(group)

    def close(self) -> None:
        for pid in list(self._groups):
            self.release(pid)
        if self._parent is not None:
            _rmdir(self._parent)
            self._parent = None


def percent_of(share: float) -> int:
    """A share as whole percent: ``percent_of(0.7)`` is 70."""
    return int(round(float(share) * 100))


def knob_for(mode: str, cores: int | None = None) -> ShareKnob:
    """The knob of sharing mode ``mode`` (``cores``: the cores a CPU pair shares; default this process's)."""
    if mode == "mps":
        return MpsThreads()
    if mode in ("cpu", "cpu-partition"):
        if cores is None:
            from sharewise.profiler.modes.base import available_cores

            cores = len(available_cores())
        return CpuQuota(mode, cores)
    return NoKnob(mode)


def _threads(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def _write(path: Path, text: str, tolerate: bool = False) -> None:
    try:
        with open(path, "w") as fh:
            fh.write(text)
    except OSError:
        if not tolerate:
            raise


def _rmdir(path: Path) -> None:
    """Remove a cgroup directory where it can go (empty of tasks and children); one still in use stays."""
    try:
        path.rmdir()
    except OSError:
        return


__all__ = ["CpuQuota", "KnobError", "MpsThreads", "NoKnob", "ShareKnob", "Split", "knob_for", "parse_splits",
           "percent_of"]
