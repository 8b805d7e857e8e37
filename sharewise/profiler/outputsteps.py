"""Steps from a job's output: ``python -m sharewise.profiler.outputsteps REGEX -- PROGRAM [ARG ...]``.

For jobs without a PyTorch optimizer to hook (``--progress-regex`` in a command spec, see
``profiler.commands``): runs the program with its output on a pipe, copies every line to this process's
stdout as it comes, and counts one step per line that matches ``REGEX`` (``re.search``), written to the
progress file of ``$SHAREWISE_PROGRESS`` (``progress.ProgressWriter``, from ``$SHAREWISE_START_STEP``).
A step's time is when its line was read. At ``$SHAREWISE_MAX_STEPS`` the program is sent SIGTERM (SIGKILL
after 10 s) and this exits 0; otherwise it exits with the program's exit code. It runs in the job's
session, so pausing or killing the job's process group reaches both. The program itself runs without the
step hook (``SHAREWISE_NO_HOOK``), and must flush its output per line (Python with ``PYTHONUNBUFFERED``,
which the launcher sets; other programs e.g. under ``stdbuf -oL``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

from sharewise.profiler import progress

#: Seconds a program has to exit after SIGTERM at the step limit before it is killed.
TERM_GRACE_S = 10.0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: python -m sharewise.profiler.outputsteps REGEX -- PROGRAM [ARG ...]\n")
        return 2
    pattern, program = re.compile(argv[0]), argv[2:]
    env = dict(os.environ)
    if env.get("SHAREWISE_DIE_WITH_PARENT") == "1":
        from sharewise.profiler.worker import die_with_parent

        die_with_parent()
    writer = progress.ProgressWriter.from_env(env)
    limit = int(env[progress.ENV_MAX_STEPS]) if env.get(progress.ENV_MAX_STEPS) else None
    env["SHAREWISE_NO_HOOK"] = "1"
    try:
        proc = subprocess.Popen(program, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env)
    except OSError as exc:
        sys.stderr.write(f"cannot start {program[0]!r}: {exc.strerror or exc}\n")
        return 127
    out = sys.stdout.buffer
    for line in proc.stdout:
        out.write(line)
        out.flush()
        if writer is not None and pattern.search(line.decode(errors="replace")):
            if writer.step() >= (limit or float("inf")):
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=TERM_GRACE_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                return 0
    return proc.wait()


if __name__ == "__main__":
    sys.exit(main())
