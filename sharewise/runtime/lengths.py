"""How long a job of a physical run is, and how the real length of a training command becomes known as it runs.

A job's length (its steps) is what the policies' unit of work multiplies. Where it comes from, in order:

1. **The trace** (``steps``, or ``duration_s`` at the workload's solo throughput): known. For a training
   command it is also a cap: the step hook ends the command there.
2. **The command's own total**: a command run with ``--total-steps N`` (or ``--total_steps``,
   ``--max-steps``, ``--max_steps``) among its arguments states its length: known.
3. Otherwise (a command only: a built-in workload's length must be given) an **estimate**: the steps the
   same command ran to its end in an earlier run in this run folder (kept in ``sitting.json``), else the
   default, ``DEFAULT_LENGTH_S`` seconds of solo run time (``sharewise run --default-length``) at the
   workload's solo step time.

An estimate is replaced by the real length as soon as it is known: the command's own total in its output (a
progress line ``12/500``, as tqdm and most training loops print, whose first number is the job's own step
count when the line was written), or its end (a command that exits 0 is done, and the steps it ran are its
length). A running job that outruns its estimate before either has its estimate doubled. ``Length.note``
says, after the run, how far off the estimate was.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

#: Seconds of solo run time the policies assume for a command whose length nothing states (``--default-length``).
DEFAULT_LENGTH_S = 300.0
#: Arguments of a training command that state its total steps.
TOTAL_FLAGS = ("--total-steps", "--total_steps", "--max-steps", "--max_steps")
#: A progress line's ``done/total`` (``12/500``, ``[12/500]``, ``step 12 / 500``); not inside a number, a date
#: or a path (``1.5/2``, ``2026/12/04``).
_PROGRESS = re.compile(rb"(?<![\d./])(\d+)\s*/\s*(\d+)(?![\d./])")
#: Steps a progress line's count may differ from the job's own (counting from 0 or from 1).
_SLACK = 1


@dataclass
class Length:
    """A job's length in steps as the policies see it, and where it came from.

    ``given`` is the length the policies saw first, from ``source``; ``estimated``: it was an estimate (else
    the trace or the command stated it). ``known``: ``steps`` is the real length. ``known_from`` and
    ``known_at`` (run clock) say how and when the real length became known while the job ran.

    Example: ``Length(steps=50, known=True, source="the default of 300 s of solo run time", given=6000.0,
    estimated=True, known_from="its end", known_at=4.2)``.
    """

    steps: float
    known: bool
    source: str
    given: float = math.nan
    estimated: bool = False
    known_from: str = ""
    known_at: float = math.nan

    def __post_init__(self) -> None:
        if math.isnan(self.given):
            self.given = self.steps

    def ended(self, steps: int, now: float) -> bool:
        """The job ended by itself (exit 0) after ``steps`` steps, its real length; return whether the policies'
        length changed."""
        changed = steps != self.steps
        if changed or (self.estimated and not self.known_from):
            self.known_from, self.known_at = "its end", now
        self.steps, self.known = float(steps), True
        return changed

    def from_output(self, total: int, now: float) -> bool:
        """The job's output states its total (``runtime.lengths.OutputTotal``); an estimate takes it (a later
        progress line may correct it); return whether the policies' length changed."""
        if not self.estimated or self.known_from == "its end" or (self.known and total == self.steps):
            return False
        self.steps, self.known = float(total), True
        self.known_from, self.known_at = f"its output (a progress line '.../{total}')", now
        return True

    def outrun(self, done: int) -> bool:
        """A job ``done`` steps in that reached its estimate: double the estimate; return whether it changed."""
        if self.known or done < self.steps:
            return False
        self.steps = float(max(2 * done, 1))
        return True

    def note(self, job_id: str, workload: str) -> str | None:
        """One line on a job that ran on an estimate (what it was, how far off), or that ended by itself
        before the length the trace gave; None otherwise."""
        head = f"job {job_id!r} ({workload})"
        if self.estimated and not self.known_from:
            return (f"{head} ran on an estimate of {self.given:.0f} steps ({self.source}); its real length never "
                    "became known (it did not end by itself)")
        if self.estimated:
            ratio = self.given / self.steps if self.steps > 0 else math.inf
            return (f"{head} ran on an estimate of {self.given:.0f} steps ({self.source}); its real length, "
                    f"{self.steps:.0f} steps, became known from {self.known_from} at {self.known_at:.1f} s: the "
                    f"estimate was {ratio:.2f}x the real length")
        if self.known_from == "its end" and self.steps != self.given:
            return (f"{head}: {self.source} gave {self.given:.0f} steps; it ended by itself after {self.steps:.0f}, "
                    "its length from then on")
        return None

    def to_json(self) -> dict:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, data: dict) -> Length:
        return cls(**{k: (math.nan if v is None else v) for k, v in data.items()})


def argv_total(argv: tuple[str, ...]) -> int | None:
    """The total steps a command's arguments state (``--total-steps N`` or ``--total-steps=N``, and the
    ``TOTAL_FLAGS`` alike), or None.

    >>> argv_total(("python", "train.py", "--total-steps", "500")), argv_total(("python", "t.py", "--max_steps=-1"))
    (500, None)
    """
    for k, word in enumerate(argv):
        flag, eq, value = word.partition("=")
        if flag not in TOTAL_FLAGS:
            continue
        if not eq:
            value = argv[k + 1] if k + 1 < len(argv) else ""
        if value.isdigit() and int(value) > 0:  # -1 and 0 mean "by epochs" in common trainers
            return int(value)
    return None


def estimate(prior_steps: float | None, step_s: float, default_s: float) -> tuple[float, str]:
    """The estimated steps of a command with no stated length, and their source in words: the steps it ran
    to its end in an earlier run in this run folder, else ``default_s`` seconds at ``step_s`` per step."""
    if prior_steps is not None and prior_steps > 0:
        return float(prior_steps), "its earlier run in this run folder"
    return max(1.0, round(default_s / step_s)), f"the default of {default_s:g} s of solo run time"


class OutputTotal:
    """Reads a job's output as it grows for its own total steps: the last progress line ``k/N`` whose ``k`` is
    the job's own step count while the line was written (between the counts at two scans, give or take one)
    and ``N`` above it. An epoch counter (``epoch 2/3``) or any other fraction fails the check."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""
        self.total: int | None = None

    def scan(self, low: int, high: int) -> int | None:
        """Read what the job wrote since the last scan, in which its step count went from ``low`` to ``high``;
        return the latest total found so far (None before one).

        A line ``k/N`` counts where ``k`` (at least 2: a first epoch's ``1/3`` says nothing) lies within
        ``low..high`` give or take one, and ``N`` is above ``high`` (a job at its last step ends anyway)."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read(1 << 20)
        except OSError:
            return self.total
        if not data:
            return self.total
        self._offset += len(data)
        lines = re.split(rb"[\r\n]", self._partial + data)
        self._partial = lines.pop()[-4096:]
        for line in lines:
            for done, total in _PROGRESS.findall(line):
                k, n = int(done), int(total)
                if 2 <= k and low - _SLACK <= k <= high + _SLACK and n > max(k, high):
                    self.total = n
        return self.total
