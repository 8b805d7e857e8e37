"""Step progress of a running job: the job appends one line per step to a file the driver names in its
environment; the driver (or a physical run) reads how many steps are done and when each ended.

One protocol for every kind of job: a built-in workload run as a job counts its own ``step()`` calls, a
training command reports through the step hook sharewise installs in its interpreter. A line is
``<step> <unix time>``: the job's step count after that step (counting steps done before a restart, so a
job that resumes from step ``k`` writes ``k + 1`` first) and the wall-clock time the step ended. Lines are
written with one ``os.write`` on a file opened ``O_APPEND``, so a reader never sees half a line of a live
writer, only possibly an unfinished last line while the write is in flight (kept until it ends).

Example file::

    1 1764770000.103221
    2 1764770000.151902
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

#: Environment variable holding the progress file's path; a job without it reports nothing.
ENV_PATH = "SHAREWISE_PROGRESS"
#: Environment variable: the job stops (exit code 0) once its step count reaches this number.
ENV_MAX_STEPS = "SHAREWISE_MAX_STEPS"
#: Environment variable: the step count the job starts from (steps done before a restart).
ENV_START_STEP = "SHAREWISE_START_STEP"


class ProgressWriter:
    """Append one line per step to the progress file at ``path`` (created if missing).

    ``start_step`` is the count before the first step of this process (a restart continues the count).
    """

    def __init__(self, path: str | os.PathLike, start_step: int = 0) -> None:
        self.path = os.fspath(path)
        self.steps = int(start_step)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> ProgressWriter | None:
        """The writer the environment asks for (``SHAREWISE_PROGRESS``), or ``None`` where it asks for none."""
        env = os.environ if environ is None else environ
        path = env.get(ENV_PATH)
        if not path:
            return None
        return cls(path, int(env.get(ENV_START_STEP, "0") or 0))

    def step(self, when: float | None = None) -> int:
        """Record one finished step (at ``when``, default now); return the step count."""
        self.steps += 1
        os.write(self._fd, f"{self.steps} {time.time() if when is None else when:.6f}\n".encode())
        return self.steps

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> ProgressWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass
class ProgressReader:
    """Read a progress file incrementally: ``poll()`` returns the steps written since the last call.

    ``steps`` is the last step count read (``start_step`` until the job reports), ``last_t`` the time of
    that step (NaN before the first), ``first_t`` the time of the first step this reader saw.
    """

    path: str
    start_step: int = 0
    steps: int = field(init=False)
    first_t: float = field(init=False, default=float("nan"))
    last_t: float = field(init=False, default=float("nan"))
    _offset: int = field(init=False, default=0)
    _partial: bytes = field(init=False, default=b"")

    def __post_init__(self) -> None:
        self.steps = int(self.start_step)

    def poll(self) -> list[tuple[int, float]]:
        """Return the ``(step, time)`` records written since the last poll (empty if none or no file yet)."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        if not data:
            return []
        self._offset += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()  # b"" after a complete last line
        out = []
        for line in lines:
            parts = line.split()
            if len(parts) != 2:
                continue
            out.append((int(parts[0]), float(parts[1])))
        if out:
            if self.first_t != self.first_t:  # NaN: the first records
                self.first_t = out[0][1]
            self.steps, self.last_t = out[-1]
        return out


def read_progress(path: str | os.PathLike) -> list[tuple[int, float]]:
    """Return every ``(step, time)`` record of a progress file (empty if it does not exist)."""
    return ProgressReader(os.fspath(path)).poll()
