"""Why a job's process ended, told from evidence only: its exit status, its own output, and the memory
records of the kernel and of the cgroup it ran in.

A job that exits 0 is done, however many steps it ran (a training script ends its own training). Any other
end is a failure, and it is called *out of memory* only where something says so:

- the job's output shows an out-of-memory error (CUDA's or PyTorch's, or the allocator's on a CPU); a
  built-in workload's runner prints one marked line with its own judgement of the exception;
- the cgroup the jobs run in counted an OOM kill while the job lived (``memory.events`` of cgroup v2,
  ``memory.oom_control`` of v1: ``oom_kill N``);
- the kernel log, where this process may read it (``/dev/kmsg``), names the job's process as killed for
  memory.

Otherwise a job killed by a signal was "killed by signal N" (a SIGKILL from outside is not an OOM), and one
that exited non-zero failed with that exit code and the last lines of its output.
"""

from __future__ import annotations

import errno
import os
import re
import signal
from dataclasses import dataclass
from pathlib import Path

#: How a job ended: done (exit code 0), or a failure named by its status.
DONE_STATUS = "done"
#: The last line of a failed built-in job's stderr starts with this, followed by ``<status>: <error>``.
FAILURE_MARK = "sharewise-job: "
#: Characters of a job's output kept in a failure's message.
TAIL_CHARS = 400
#: An out-of-memory error in a job's output: CUDA's, PyTorch's (GPU or CPU allocator), Python's own.
OOM_OUTPUT = re.compile(
    r"(torch\.(cuda\.)?OutOfMemoryError|CUDA out of memory|CUDA error: out of memory|CUBLAS_STATUS_ALLOC_FAILED"
    r"|DefaultCPUAllocator: (can't allocate memory|not enough memory)|^MemoryError\b)",
    re.MULTILINE,
)
#: A kernel log record of a process killed for memory, e.g. ``Out of memory: Killed process 4242 (python)`` or
#: ``oom-kill:constraint=CONSTRAINT_MEMCG,...,task=python,pid=4242,uid=0``.
_KERNEL_OOM = re.compile(r"(?:Killed process (\d+)|oom-kill:.*\bpid=(\d+))")
_SIGNALS = {int(s) for s in signal.Signals}


@dataclass(frozen=True)
class Exit:
    """How a job's process ended: ``status`` (``done``, ``failed``, ``oom``), the exit code, and a message."""

    status: str
    code: int
    message: str = ""


@dataclass(frozen=True)
class Evidence:
    """What is known of a job's end beyond its exit code: its ``output`` (the tail of its log), the OOM kills
    its cgroup counted while it lived (``None``: unreadable here), and whether the kernel log names one of
    its processes as killed for memory."""

    output: str = ""
    oom_kills: int | None = None
    kernel_oom: bool = False


def exit_reason(code: int, evidence: Evidence) -> Exit:
    """Why a job whose process returned ``code`` (``Popen.returncode``: negative for a signal) ended.

    Examples: ``exit_reason(0, Evidence())`` is ``Exit("done", 0)``; ``exit_reason(-9, Evidence(oom_kills=0))``
    is ``Exit("failed", -9, "killed by signal 9 (SIGKILL)")``; ``exit_reason(1, Evidence(output="...
    torch.OutOfMemoryError: CUDA out of memory ..."))`` is an ``oom`` exit quoting that line.
    """
    if code == 0:
        return Exit(DONE_STATUS, 0)
    lines = [ln.strip() for ln in evidence.output.splitlines() if ln.strip()]
    marked = [ln for ln in lines if ln.startswith(FAILURE_MARK)]
    if marked:  # a built-in workload's runner judged its own exception
        status, _, message = marked[-1][len(FAILURE_MARK):].partition(": ")
        return Exit(status if status in ("oom", "failed") else "failed", code, message)
    tail = " | ".join(lines[-3:])[-TAIL_CHARS:]
    said = OOM_OUTPUT.search(evidence.output)
    if said:
        line = next(ln for ln in lines if said.group(0) in ln)
        return Exit("oom", code, f"out of memory (its output says so): {line[-TAIL_CHARS:]}")
    if code < 0:
        how = f"killed by signal {-code}" + (f" ({signal.Signals(-code).name})" if -code in _SIGNALS else "")
        if evidence.kernel_oom:
            return Exit("oom", code, f"{how}: the kernel's OOM killer (the kernel log names its process)")
        if evidence.oom_kills:
            return Exit("oom", code, f"{how}: out of memory (its cgroup counted {evidence.oom_kills} OOM kill(s) "
                                     "while it ran)")
        return Exit("failed", code, how + (f": {tail}" if tail else ""))
    return Exit("failed", code, f"exit code {code}" + (f": {tail}" if tail else ""))


#: The last line of a Python traceback: an exception's name (dotted, ending in Error, Exception, Interrupt or
#: Exit), then its message (``RuntimeError: boom``, ``torch.OutOfMemoryError: ...``, ``KeyboardInterrupt``).
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b(:.*)?$")


def error_line(message: str) -> str:
    """The part of a failure's message a reader needs first: its head (``exit code 1``) and, where its output
    tail holds a Python traceback, the exception's line (``RuntimeError: boom``) instead of the tail, whose
    caret line (``^^^^``) would push the error out of a cut; else the message unchanged.

    >>> error_line("exit code 1: raise RuntimeError('boom') | ^^^^^^^^^^^^^^^^^^^^ | RuntimeError: boom")
    'exit code 1: RuntimeError: boom'
    >>> error_line("killed by signal 9 (SIGKILL)")
    'killed by signal 9 (SIGKILL)'
    """
    head, sep, tail = message.partition(": ")
    if not sep:
        return message
    found = [part.strip() for part in tail.split(" | ") if _EXCEPTION_LINE.match(part.strip())]
    return f"{head}: {found[-1]}" if found else message


# ---- gathering the evidence --------------------------------------------------------------------------
def output_tail(path: str | os.PathLike, chars: int = 16 * TAIL_CHARS) -> str:
    """The last ``chars`` characters of a job's log (empty if unreadable)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - chars))
            return fh.read().decode(errors="replace")
    except OSError:
        return ""


def cgroup_oom_kills(proc_cgroup: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> int | None:
    """The OOM kills the memory cgroup of this process (and so of the jobs it starts) has counted, or None
    where no cgroup file says (cgroup v2 ``memory.events``, v1 ``memory.oom_control``; ``oom_kill N``)."""
    try:
        entries = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return None
    files = []
    for entry in entries:
        _, controllers, path = entry.split(":", 2)
        rel = path.lstrip("/")
        if controllers == "":  # cgroup v2 (unified)
            files += [Path(root, rel, "memory.events"), Path(root, "unified", rel, "memory.events")]
        elif "memory" in controllers.split(","):
            files.append(Path(root, "memory", rel, "memory.oom_control"))
    for file in files:
        try:
            text = file.read_text()
        except OSError:
            continue
        found = re.search(r"^oom_kill (\d+)$", text, re.MULTILINE)
        if found:
            return int(found.group(1))
    return None


def kernel_oom_pids(lines: list[str]) -> set[int]:
    """The processes that kernel log ``lines`` record as killed for memory.

    >>> sorted(kernel_oom_pids(["6,812,93,-;Out of memory: Killed process 4242 (python) total-vm:9kB",
    ...                         "6,813,94,-;oom-kill:constraint=CONSTRAINT_MEMCG,task=python,pid=77,uid=0"]))
    [77, 4242]
    """
    return {int(a or b) for ln in lines for a, b in _KERNEL_OOM.findall(ln)}


def kernel_log(path: str = "/dev/kmsg") -> list[str]:
    """The kernel log's records where this process may read them (``/dev/kmsg``), else an empty list."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return []
    lines: list[str] = []
    try:
        while True:
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # records overwritten while reading: go on with the next
                    continue
                break
            if not record:
                break
            lines.append(record.decode(errors="replace"))
    finally:
        os.close(fd)
    return lines


def evidence(log_path: str | os.PathLike, code: int, pid: int, oom_kills_before: int | None) -> Evidence:
    """Gather what tells why the job with process ``pid`` returned ``code``: its log's tail, the OOM kills its
    cgroup counted since ``oom_kills_before`` (read at its start), and, for a job killed by a signal, whether
    the kernel log names its process."""
    kills = None
    if oom_kills_before is not None:
        now = cgroup_oom_kills()
        kills = None if now is None else max(0, now - oom_kills_before)
    kernel = code < 0 and pid in kernel_oom_pids(kernel_log())
    return Evidence(output_tail(log_path), kills, kernel)
