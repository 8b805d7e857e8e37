"""Typed, frozen configuration of solo profiles and pair campaigns, handed over whole."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from sharewise.errors import ConfigError
from sharewise.profiler.modes import SHARING_MODES, modes_for

SIZES = ("tiny", "small", "full")
#: ``warm``: one long-lived worker process per (workload, placement) for a whole campaign or profile;
#: ``fresh``: new processes for every repeat (today's pytorch/benchmark-style isolation).
ISOLATIONS = ("warm", "fresh")

# Measurement constants (docs/development/conventions.md, practice 3): warm-up until step time settles, then
# fixed windows.
WARMUP_STEPS = 4  # at least this many steps before any window
WARMUP_MAX_S = 20.0  # give up waiting for step time to settle after this long (and record it)
SETTLE_TOLERANCE = 0.10  # median of the last 3 steps within 10% of that one step earlier: settled
# A window with fewer steps is extended, never reported. Few steps and short windows: on a shared VM each
# vCPU's speed moves by 15-25% from one 0.2 s to the next (independently per vCPU), so many short
# alternating windows pin a slowdown down faster than a few long ones (bench_campaign.py).
MIN_WINDOW_STEPS = 3
CI_TARGET = 0.02  # repeat until the 95% confidence half-width of each slowdown is within 2% of it
DISTURBANCE_LIMIT = 0.10  # share of the machine used by foreign processes that makes a run void
IDLE_THRESHOLD = 0.10  # share of the machine busy that counts as "not idle" before a run
# Seconds a warm worker's solo window stays valid as the solo of its later pairs, by device kind. Under the solo
# rule (``solo``: a job's solo has the host share it has next to a partner) a job's solo is the same in each of
# its pairs; a GPU's speed holds over seconds, so the pairs of a workload share its recent solo windows. A
# shared VM's vCPUs drift by 15-25% within a second (``MIN_WINDOW_STEPS``): on the CPU each repeat measures its own.
SOLO_REUSE_S = {"cuda": 20.0, "cpu": 0.0}


@dataclass(frozen=True)
class RunConfig:
    """Settings of one campaign or profile run.

    ``device`` is ``"cpu"``, ``"cuda"`` or ``"cuda:i"``; ``mode`` one of ``SHARING_MODES`` whose device kind
    is the device's (``cpu``/``cpu-partition`` on CPUs, ``timeslice``/``mps`` on CUDA devices). ``window_s``
    is the measurement window, extended as needed so each window holds ``min_window_steps`` steps.
    A pair (or a profile) runs at least ``repeats`` and at most ``max_repeats`` repeats, stopping once the
    95% confidence half-width of each slowdown is within ``ci_target`` of it; ``isolation`` says whether
    the repeats run in warm long-lived processes (``"warm"``) or each in new ones (``"fresh"``).
    """

    device: str = "cpu"
    mode: str = "cpu"
    size: str = "small"
    batch_size: int | None = None
    window_s: float = 0.5
    max_window_s: float = 30.0
    min_window_steps: int = MIN_WINDOW_STEPS
    warmup_steps: int = WARMUP_STEPS
    warmup_max_s: float = WARMUP_MAX_S
    repeats: int = 3  # at least this many repeats (rounds of solo and shared windows)
    max_repeats: int = 20
    ci_target: float = CI_TARGET
    isolation: str = "warm"
    threads: int | None = None  # per process; default: the cores the process may use
    timeout_s: float = 300.0  # per repeat (worker start-ups included), and per worker start
    idle_threshold: float = IDLE_THRESHOLD
    idle_wait_s: float = 30.0
    disturbance_limit: float = DISTURBANCE_LIMIT
    disturbance_retries: int = 2
    trace_steps: int = 3
    features: bool = True
    # Run the job next to the probe once per repeat for the sensitivity/pressure features (with ``features``).
    probe: bool = True
    # Extension rounds of a pair still wider than ``ci_target`` after ``max_repeats``, run once the planned pairs are
    # measured: each with windows twice as long and up to ``max_repeats`` more repeats (``pair.extension_config``).
    # 0 by default: ``max_repeats`` is the bound a user set; a campaign under a time budget (the GPU check) asks.
    extend_rounds: int = 0
    # Seconds a campaign may take (None: no limit): a pair that would not end in time is left for a rerun, and
    # extensions run only in the time left; the campaign then ends by itself, before an outer limit cuts it.
    time_budget_s: float | None = None
    # Seconds a solo window serves a worker's later pairs (None: ``SOLO_REUSE_S`` of the device kind; 0: never).
    solo_reuse_s: float | None = None
    # The sharing knob (``profiler.knob``): job a's share of the device in a pair's shared windows, a fraction
    # (None: no knob, each job as the mode gives it). Solo windows run without the knob: a slowdown at a split is
    # against the job's solo at the full device, the same denominator as without one.
    split: float | None = None
    # Shares (whole percents) at which a solo profile also measures the job's rate under the knob: its scaling
    # curve, profile columns ``f_share_<percent>`` (``predictor.structure.SHARE_CURVE``); () measures none.
    shares: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.mode not in SHARING_MODES:
            raise ConfigError(f"mode must be one of {SHARING_MODES.names()}, got {self.mode!r}")
        kind = device_kind(self.device)
        mode_kind = SHARING_MODES.get(self.mode).device_kind
        if kind == "cpu" and mode_kind != "cpu":
            raise ConfigError(
                f"mode {self.mode!r} needs a CUDA device, got device {self.device!r}; "
                f"on the CPU use one of {modes_for('cpu')}"
            )
        if kind == "cuda" and mode_kind != "cuda":
            raise ConfigError(
                f"mode {self.mode!r} is for CPU devices, got device {self.device!r}; "
                f"use {' or '.join(repr(m) for m in modes_for('cuda'))}"
            )
        if self.size not in SIZES:
            raise ConfigError(f"size must be one of {list(SIZES)}, got {self.size!r}")
        positive = {
            "window_s": self.window_s,
            "max_window_s": self.max_window_s,
            "timeout_s": self.timeout_s,
            "repeats": self.repeats,
            "min_window_steps": self.min_window_steps,
        }
        for name, value in positive.items():
            if not value > 0:
                raise ConfigError(f"{name} must be positive, got {value!r}")
        if self.isolation not in ISOLATIONS:
            raise ConfigError(f"isolation must be one of {list(ISOLATIONS)}, got {self.isolation!r}")
        if not 0 < self.ci_target < 1:
            raise ConfigError(f"ci_target is a fraction of the slowdown in (0, 1), got {self.ci_target!r}")
        if self.max_repeats < self.repeats:
            raise ConfigError(f"max_repeats ({self.max_repeats}) must be >= repeats ({self.repeats})")
        if self.batch_size is not None and self.batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.threads is not None and self.threads < 1:
            raise ConfigError(f"threads must be >= 1, got {self.threads}")
        if self.extend_rounds < 0:
            raise ConfigError(f"extend_rounds must be >= 0 (0: no extension), got {self.extend_rounds}")
        if self.time_budget_s is not None and not self.time_budget_s > 0:
            raise ConfigError(f"time_budget_s must be a positive number of seconds, got {self.time_budget_s!r}")
        if self.split is not None:
            from sharewise.profiler.knob import Split

            Split(self.split)  # a whole percent in 5-95, else a ConfigError saying so
            if self.mode == "cpu-partition":
                raise ConfigError(
                    "a split shares one set of cores by a CPU quota: --mode cpu-partition gives each job its own "
                    "cores, so use --mode cpu with --split (or no --split)"
                )
            if self.mode == "timeslice":
                from sharewise.profiler.knob import knob_for

                knob_for(self.mode).check()  # raises: time-slicing has no knob
        for percent in self.shares:
            from sharewise.profiler.knob import Split

            Split(percent / 100)  # a whole percent in 5-95
        if self.shares and self.mode in ("timeslice", "cpu-partition"):
            raise ConfigError(
                f"a scaling curve (--shares) is measured under the sharing knob, which --mode {self.mode} does not "
                "have; use --mode cpu on a CPU or --mode mps on a GPU"
            )
        if self.solo_reuse_s is not None and not self.solo_reuse_s >= 0:
            raise ConfigError(f"solo_reuse_s must be >= 0 seconds (0: never), got {self.solo_reuse_s!r}")
        # "cuda" is the current CUDA device, which is device 0 in a fresh worker process; recorded and handed to
        # workers with its index, since torch.cuda.set_device refuses a CUDA device without one.
        if self.device == "cuda":
            object.__setattr__(self, "device", "cuda:0")

    @property
    def solo_reuse(self) -> float:
        """Seconds a worker's solo window serves its later pairs: ``solo_reuse_s``, else its device kind's default.

        >>> RunConfig().solo_reuse, RunConfig(device="cuda", mode="timeslice").solo_reuse
        (0.0, 20.0)
        """
        return SOLO_REUSE_S[device_kind(self.device)] if self.solo_reuse_s is None else float(self.solo_reuse_s)

    def replace(self, **changes) -> RunConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def device_kind(device: str) -> str:
    """Return ``"cpu"`` or ``"cuda"`` for a device string, or raise ``ConfigError``."""
    if device == "cpu":
        return "cpu"
    if device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit()):
        return "cuda"
    raise ConfigError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")


def default_mode(device: str) -> str:
    """Return the default sharing mode of a device: the first registered mode of its kind.

    >>> default_mode("cpu"), default_mode("cuda:1")
    ('cpu', 'timeslice')
    """
    return modes_for(device_kind(device))[0]
