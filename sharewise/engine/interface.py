"""Types every policy shares: the queue, the cluster state, a placement, a decision, and GPU-picking helpers.

A policy is a pure function ``policy(queue, cluster, table, now) -> list[Placement] | Decision``. Most return
the placements to start now; a preemptive policy (``preemptive = True`` on the function, e.g. Tiresias)
returns a ``Decision`` that may also stop running jobs and ask to be called again at a given time. A policy
that never shares a GPU says so with ``shares_gpus = False`` on the function: the simulator then calls it
only when a queued job fits on the free GPUs, since it could start nothing otherwise. A policy that places
every running job again at each call (``replaces_running = True``; a job it stops and starts on the same
GPUs keeps running, see ``simulator``) is called while any job runs; ``round_based = True`` marks one defined
for rounds (PAL's artifact's), which the event-driven benchmarks leave out. The
simulator builds the inputs as numpy views, so a policy can be vectorised over the queue and the GPUs; the
views are read-only, so a policy cannot change the state it is shown.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from sharewise.errors import InvalidPlacementError

if TYPE_CHECKING:
    from sharewise.engine.table import SlowdownTable

MAX_JOBS_PER_GPU = 2


class Placement(NamedTuple):
    """Start queued job ``job`` on GPUs ``gpus`` (as many as it asked for, each holding at most one more job).

    Example: ``Placement(job=7, gpus=(12, 13))``.
    """

    job: int
    gpus: tuple[int, ...]


class Decision(NamedTuple):
    """A policy's full answer: stop the running jobs ``preempt``, then start ``start`` (on GPUs free after the
    stops); call the policy again at ``wake_at`` (seconds) even if no job arrives or ends by then.

    Example: ``Decision(start=[Placement(4, (0,))], preempt=(2,), wake_at=7200.0)``.
    """

    start: list[Placement]
    preempt: tuple[int, ...] = ()
    wake_at: float = math.inf


def as_decision(answer: list[Placement] | Decision | None) -> Decision:
    """Return a policy's answer as a ``Decision`` (a list of placements starts them, stops nothing)."""
    if isinstance(answer, Decision):
        return answer
    return Decision(start=list(answer or ()))


@dataclass(frozen=True)
class Queue:
    """The waiting jobs, in arrival order; every field is a read-only array of the same length.

    ``job`` is sorted ascending and indexes the caller's job arrays (and ``ClusterState.job_*``);
    ``remaining`` is the job's remaining exclusive run time in seconds on a speed-1.0 GPU (schedulers in the
    SJF family assume it is known); ``workload`` holds ids of the ``SlowdownTable``; ``attained`` the
    service a job received so far in GPU-seconds (GPUs x time run; nonzero for a preempted job), or None.
    """

    job: np.ndarray
    arrival: np.ndarray
    gpus: np.ndarray
    remaining: np.ndarray
    workload: np.ndarray
    attained: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.job.shape[0])

    def __post_init__(self) -> None:
        _freeze(self)

    @classmethod
    def of_new_jobs(cls, n: int) -> Queue:
        """``n`` jobs arrived at 0, one GPU each, of workload 0 and one second of work: a policy's first call.

        >>> len(Queue.of_new_jobs(1))
        1
        """
        return cls(job=np.arange(n), arrival=np.zeros(n), gpus=np.ones(n, dtype=np.int64), remaining=np.ones(n),
                   workload=np.zeros(n, dtype=np.int64), attained=np.zeros(n))


@dataclass(frozen=True)
class ClusterState:
    """GPUs and the jobs on them; arrays are read-only.

    ``resident[g]`` holds up to two job indices on GPU ``g`` (``-1`` marks an empty slot; slot 0 fills first).
    ``node[g]`` and ``speed[g]`` describe the GPU (speed 1.0 = nominal; PAL's performance-variability score).
    ``job_remaining``, ``job_workload``, ``job_ngpus`` (GPUs the job holds), ``job_start`` (when it started)
    and ``job_work`` (its whole exclusive run time) are indexed by job and are meaningful for running jobs
    (queued jobs are described by the ``Queue``); with ``now`` they give a job's slowdown so far. A job
    spanning more than one node runs ``cross_node_slowdown`` times slower: locality-aware policies may weigh
    it. ``slo`` is the operator's bound on a job's realized slowdown (run time over exclusive run time);
    SLO-aware policies respect it; ``preempt_delay_s`` is what restarting a preempted job costs it in
    exclusive run time (``Cluster.preempt_delay_s``). ``job_attained`` (GPU-seconds of service so far) and
    ``job_arrival`` are indexed by job for every job, for policies that rank by attained service (Tiresias).
    ``occupied``,
    if given, is the number of jobs on each GPU as the owner of ``resident`` keeps it (the simulator does);
    ``occupancy()`` copies it instead of counting. ``placed_at``, if given, is when the newest job on each
    GPU was placed there (NaN for a GPU that never held one), so a policy can tell a pair that just formed.
    ``class_speed`` and ``job_class``, if given, are PAL's per-class variability: ``class_speed[c, g]`` is the
    speed of GPU ``g`` for a job of class ``c`` (``job_class``, indexed by job for every job), and ``speed``
    is then a class-blind summary (the geometric mean over classes); ``speed_of(j)`` gives job ``j``'s row.
    """

    resident: np.ndarray
    node: np.ndarray
    speed: np.ndarray
    job_remaining: np.ndarray
    job_workload: np.ndarray
    job_ngpus: np.ndarray
    job_start: np.ndarray
    job_work: np.ndarray
    cross_node_slowdown: float = 1.0
    slo: float = 2.0
    preempt_delay_s: float = 0.0
    job_attained: np.ndarray | None = None
    job_arrival: np.ndarray | None = None
    occupied: np.ndarray | None = None
    placed_at: np.ndarray | None = None
    class_speed: np.ndarray | None = None
    job_class: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.resident.flags.writeable:  # the simulator hands over read-only views already: skip the check
            _freeze(self)

    @property
    def n_gpus(self) -> int:
        return int(self.resident.shape[0])

    @classmethod
    def idle(cls, n_gpus: int, n_jobs: int) -> ClusterState:
        """``n_gpus`` empty GPUs of speed 1.0 on one node, for ``n_jobs`` jobs none of which runs yet."""
        return cls(resident=np.full((n_gpus, 2), -1, dtype=np.int64), node=np.zeros(n_gpus, dtype=np.int64),
                   speed=np.ones(n_gpus), job_remaining=np.ones(n_jobs), job_workload=np.zeros(n_jobs, dtype=np.int64),
                   job_ngpus=np.ones(n_jobs, dtype=np.int64), job_start=np.full(n_jobs, np.nan),
                   job_work=np.ones(n_jobs), job_attained=np.zeros(n_jobs), job_arrival=np.zeros(n_jobs),
                   occupied=np.zeros(n_gpus, dtype=np.int64), placed_at=np.full(n_gpus, np.nan))

    def speed_of(self, job: int) -> np.ndarray:
        """Return the speed of every GPU for job ``job``: its class's row of ``class_speed``, else ``speed``."""
        if self.class_speed is None or self.job_class is None:
            return self.speed
        return self.class_speed[self.job_class[job]]

    def occupancy(self) -> np.ndarray:
        """Return the number of jobs on each GPU (0, 1 or 2), a new array the caller may change."""
        if self.occupied is not None:
            return self.occupied.copy()
        return (self.resident >= 0).sum(axis=1)


Policy = Callable[["Queue", "ClusterState", "SlowdownTable", float], "list[Placement] | Decision"]


def _freeze(obj) -> None:
    """Make every writable array field of a frozen ``Queue`` or ``ClusterState`` a read-only view (no copy).

    What the docstrings promise, for every caller alike; and the compiled kernels see one array type, so a
    kernel is compiled once for the simulator's read-only views and a test's own arrays, not once for each
    (30 compiled specializations instead of 51 in the fast tests, 20 s less on a fresh clone).
    """
    cls = type(obj)
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls))
    for name in names:
        value = getattr(obj, name)
        if type(value) is np.ndarray and value.flags.writeable:
            object.__setattr__(obj, name, readonly(value))


_FIELDS: dict[type, tuple[str, ...]] = {}


def readonly(array: np.ndarray) -> np.ndarray:
    """Return a read-only view of ``array`` (no copy)."""
    view = array.view()
    view.flags.writeable = False
    return view


def pick_free_gpus(free: np.ndarray, node: np.ndarray, k: int) -> np.ndarray | None:
    """Choose ``k`` GPUs among those marked in ``free``, on as few nodes as possible, ascending; ``None`` if too few.

    A job that fits on one node goes to the node with the fewest free GPUs that still holds it (best fit, so
    whole nodes stay free for big jobs); a bigger job takes the fullest-free nodes first. The rule is compiled
    (``_gpus.pick_free_gpus``, imported on first use: ``recommend`` hands GPUs out with ``FreeGpus`` and never
    loads numba). Example: ``pick_free_gpus(np.array([True, True, False, True]), np.array([0, 0, 1, 1]), 1)`` is
    ``array([3])``.
    """
    from sharewise.engine.gpus import pick_free_gpus as pick

    if k <= 0:
        return np.empty(0, dtype=np.int64)
    chosen = pick(~np.asarray(free, dtype=bool), node, k)
    return chosen if chosen.shape[0] else None


class FreeGpus:
    """Free GPUs handed out block by block with ``pick_free_gpus``'s rule, without scanning every GPU per block.

    ``take(k)`` returns what ``pick_free_gpus(free, node, k)`` returns on the GPUs not taken yet, as a sorted
    list (``None`` if fewer than ``k`` are left), and takes them. Handing out ``m`` blocks costs
    O(GPUs + m log nodes) instead of ``pick_free_gpus``'s O(m x GPUs): what ``recommend`` needs for 100,000
    jobs on 50,000 GPUs. Every rule takes a prefix of a node's free GPUs in index order, so each node keeps
    its free GPUs as a sorted list and a cursor; two sorted lists of node keys answer the rule's questions:
    ``(count, first free GPU, node)`` for one GPU (the node with the fewest free GPUs, ties to the lowest GPU
    index) and ``(count, node)`` for a block that fits on a node (the fewest free GPUs that still hold it,
    ties to the lowest node).

    Example: ``FreeGpus(np.array([True, True, False, True]), np.array([0, 0, 1, 1])).take(1)`` is ``[3]``
    (node 1 has the fewest free GPUs), then ``take(2)`` is ``[0, 1]``.
    """

    def __init__(self, free: np.ndarray, node: np.ndarray) -> None:
        idx = np.flatnonzero(free)
        nodes = np.asarray(node)[idx]
        order = np.argsort(nodes, kind="stable")  # by node, GPUs ascending inside a node
        idx, nodes = idx[order], nodes[order]
        starts = np.flatnonzero(np.r_[True, nodes[1:] != nodes[:-1]]) if idx.shape[0] else np.empty(0, np.int64)
        bounds = np.r_[starts, idx.shape[0]].tolist()
        self._gpus = {int(nodes[s]): idx[s:e].tolist() for s, e in zip(bounds[:-1], bounds[1:], strict=True)}
        self._cursor = dict.fromkeys(self._gpus, 0)
        self._one = sorted((len(g), g[0], n) for n, g in self._gpus.items())
        self._many = sorted((len(g), n) for n, g in self._gpus.items())
        self.left = int(idx.shape[0])

    def _count(self, n: int) -> int:
        return len(self._gpus[n]) - self._cursor[n]

    def _take_from(self, n: int, k: int) -> list[int]:
        """Take the first ``k`` free GPUs of node ``n`` and move its keys."""
        count, at = self._count(n), self._cursor[n]
        gpus = self._gpus[n]
        del self._one[bisect.bisect_left(self._one, (count, gpus[at], n))]
        del self._many[bisect.bisect_left(self._many, (count, n))]
        self._cursor[n] = at + k
        if count > k:
            bisect.insort(self._one, (count - k, gpus[at + k], n))
            bisect.insort(self._many, (count - k, n))
        self.left -= k
        return gpus[at : at + k]

    def take_ones(self, m: int) -> list[int]:
        """Take ``m`` GPUs one at a time (what ``m`` calls of ``take(1)`` return, in order); fewer if fewer are left.

        ``take(1)`` takes from the node with the fewest free GPUs, which stays the one with the fewest until it
        is empty: so each node in turn gives up its free GPUs in one step.
        """
        out: list[int] = []
        while len(out) < m and self.left:
            count, _, n = self._one[0]
            out.extend(self._take_from(n, min(count, m - len(out))))
        return out

    def take(self, k: int) -> list[int] | None:
        """Take ``k`` GPUs by ``pick_free_gpus``'s rule and return them ascending; ``None`` if too few are left."""
        if k > self.left:
            return None
        if k <= 0:
            return []
        if k == 1:
            return self._take_from(self._one[0][2], 1)
        i = bisect.bisect_left(self._many, (k, -1))
        if i < len(self._many):
            return self._take_from(self._many[i][1], k)
        # No node holds k: the fullest-free nodes first, GPUs in index order among nodes of equal count. Of a
        # group of equal count only its r nodes with the lowest first GPU can supply its r lowest GPUs.
        picked: list[tuple[int, int]] = []  # (GPU, node)
        end = len(self._one)
        while len(picked) < k:
            count = self._one[end - 1][0]
            start = bisect.bisect_left(self._one, (count, -1, -1))
            want = k - len(picked)
            group = [(g, n) for _, _, n in self._one[start : min(end, start + want)] for g in self._free_of(n)]
            picked.extend(sorted(group)[:want])
            end = start
        taken: dict[int, int] = {}
        for _, n in picked:
            taken[n] = taken.get(n, 0) + 1
        for n, m in taken.items():
            self._take_from(n, m)
        return sorted(g for g, _ in picked)

    def _free_of(self, n: int) -> list[int]:
        return self._gpus[n][self._cursor[n] :]


def check_placements(
    placements: Sequence[Placement], queue: Queue, cluster: ClusterState, table: SlowdownTable, policy: str
) -> None:
    """Raise ``InvalidPlacementError`` unless ``placements`` can all start together on ``cluster``.

    Checks: each job is queued and placed once, gets exactly the GPUs it asked for, no GPU ends with more
    than two jobs, and every pair that would share a GPU may share according to ``table``. A fast
    check runs first (the simulator validates every call); only a failing call walks the placements one by
    one to name the first problem.
    """
    if _all_valid(placements, queue, cluster, table):
        return
    _walk_placements(placements, queue, cluster, table, policy)


def _walk_placements(
    placements: Sequence[Placement], queue: Queue, cluster: ClusterState, table: SlowdownTable, policy: str
) -> None:
    """Check placements one by one, in order, raising ``InvalidPlacementError`` for the first problem."""
    occupancy = cluster.occupancy().copy()
    partner = np.where(cluster.resident[:, 0] >= 0, cluster.resident[:, 0], -1)
    partner_workload = np.full(cluster.n_gpus, -1)
    has = partner >= 0
    partner_workload[has] = cluster.job_workload[partner[has]]
    seen: set[int] = set()
    for p in placements:
        job = int(p.job)
        i = int(np.searchsorted(queue.job, job))
        if i >= len(queue) or int(queue.job[i]) != job:
            raise InvalidPlacementError(f"policy {policy!r} placed job {job}, which is not in the queue")
        if job in seen:
            raise InvalidPlacementError(f"policy {policy!r} placed job {job} twice")
        seen.add(job)
        gpus = np.asarray(p.gpus, dtype=np.int64)
        if gpus.shape[0] != int(queue.gpus[i]) or np.unique(gpus).shape[0] != gpus.shape[0]:
            raise InvalidPlacementError(
                f"policy {policy!r} gave job {job} GPUs {list(map(int, gpus))}; it asked for "
                f"{int(queue.gpus[i])} distinct GPUs"
            )
        if (gpus < 0).any() or (gpus >= cluster.n_gpus).any():
            raise InvalidPlacementError(
                f"policy {policy!r} gave job {job} GPUs {list(map(int, gpus))}; the cluster has GPUs "
                f"0..{cluster.n_gpus - 1}"
            )
        for g in gpus:
            if occupancy[g] >= MAX_JOBS_PER_GPU:
                raise InvalidPlacementError(
                    f"policy {policy!r} put job {job} on GPU {int(g)}, which already holds "
                    f"{MAX_JOBS_PER_GPU} jobs"
                )
            if (
                occupancy[g] == 1
                and not table.may_share(np.array([queue.workload[i]]), np.array([partner_workload[g]]))[0]
            ):
                raise InvalidPlacementError(
                    f"policy {policy!r} paired job {job} ({table.workloads[queue.workload[i]]}) with "
                    f"{table.workloads[partner_workload[g]]} on GPU {int(g)}; that pair may not share "
                    "(out of memory or never measured)"
                )
            occupancy[g] += 1
            partner_workload[g] = queue.workload[i]


def _all_valid(placements: Sequence[Placement], queue: Queue, cluster: ClusterState, table: SlowdownTable) -> bool:
    """Whether every check of ``check_placements`` passes: one pass over the placed GPUs.

    A call places a few jobs on a few GPUs each, so plain Python over them beats array set-up.
    """
    if not placements:
        return True
    n = cluster.n_gpus
    occupancy = cluster.occupancy()
    resident = cluster.resident
    allowed = table.allowed
    jobs = [int(p.job) for p in placements]
    if len(set(jobs)) != len(jobs):
        return False
    positions = np.searchsorted(queue.job, jobs).tolist()
    n_queued = len(queue)
    newcomer: dict[int, int] = {}  # GPU -> workload of the one job this call put on a free GPU
    for p, job, i in zip(placements, jobs, positions, strict=True):
        if i >= n_queued or int(queue.job[i]) != job:
            return False
        gpus = p.gpus
        if len(gpus) != int(queue.gpus[i]) or len(set(gpus)) != len(gpus):
            return False
        wl = int(queue.workload[i])
        for g in gpus:
            g = int(g)
            if g < 0 or g >= n:
                return False
            held = int(occupancy[g])
            if held >= MAX_JOBS_PER_GPU:
                return False
            if held == 1:
                if g in newcomer or not allowed[wl, cluster.job_workload[resident[g, 0]]]:
                    return False
                newcomer[g] = -1  # full now
            elif g in newcomer:
                other = newcomer[g]
                if other < 0 or not allowed[other, wl]:
                    return False
                newcomer[g] = -1
            else:
                newcomer[g] = wl
    return True


def smallest_first(keys: np.ndarray, m: int) -> np.ndarray:
    """Return positions of at least the ``m`` smallest ``keys`` in ascending order (ties: lower position).

    The result is an exact prefix of ``np.argsort(keys, kind="stable")`` holding every key up to the
    ``m``-th smallest, found in linear time: a policy that places at most ``m`` jobs per call does not sort
    a queue of thousands at every event. Continue with ``rest_in_order`` if the prefix runs out.
    """
    n = keys.shape[0]
    if m >= n or n <= 64:
        return np.argsort(keys, kind="stable")
    if m <= 0:
        return np.empty(0, dtype=np.int64)
    kth = np.partition(keys, m - 1)[m - 1]
    idx = np.flatnonzero(keys <= kth)
    return idx[np.argsort(keys[idx], kind="stable")]


def rest_in_order(keys: np.ndarray, prefix: np.ndarray) -> np.ndarray:
    """Return the positions not in ``prefix`` (from ``smallest_first``), in ascending key order."""
    if prefix.shape[0] == keys.shape[0]:
        return np.empty(0, dtype=np.int64)
    mask = np.ones(keys.shape[0], dtype=bool)
    mask[prefix] = False
    idx = np.flatnonzero(mask)
    return idx[np.argsort(keys[idx], kind="stable")]


def in_order(keys: np.ndarray, m: int, positions: np.ndarray | None = None):
    """Yield ``positions`` (default: 0..n-1) in ascending ``keys`` order, lazily.

    Only the ``m`` smallest keys (and their ties) are sorted up front; the rest is sorted only if the caller
    keeps iterating (see ``smallest_first``).
    """
    if positions is None:
        positions = np.arange(keys.shape[0])
    prefix = smallest_first(keys, m)
    yield from positions[prefix].tolist()
    rest = rest_in_order(keys, prefix)
    if rest.shape[0]:
        yield from positions[rest].tolist()


def queue_keys(queue: Queue, order: str) -> np.ndarray:
    """Return each queued job's sort key for ``order``: ``fifo`` (arrival) or ``sjf`` (remaining time)."""
    if order == "sjf":
        return queue.remaining
    if order == "fifo":
        return queue.arrival
    raise ValueError(f"queue order must be 'fifo' or 'sjf', got {order!r}")
