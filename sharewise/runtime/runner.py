"""A built-in (or ``file.py:Class``) workload run as a job: build it, step it until its step count reaches the
target, report every step through the progress protocol, exit 0.

Run as ``python -m sharewise.runtime.runner SPEC_JSON`` with the progress variables of
``sharewise.profiler.progress`` in the environment (the file, the start step, the target). The thread and
OpenMP environment is set by the driver before this process starts (``modes.worker_env``), as for a
profiling worker, so a job runs exactly as its workload was measured. Every step counts as training: there
is no separate warm-up, so the first steps pay the one-off costs, as they do in any training job. After the
last step the process exits at once (no teardown: the slot is free when the work is done). A failure prints
one line ``sharewise-job: <status>: <error>`` (status ``oom`` or ``failed``) on stderr and exits 1.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

from sharewise.runtime.exits import FAILURE_MARK  # the last line of a failed job's stderr starts with it


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from sharewise.profiler.worker import build, die_with_parent, is_oom, pin

    die_with_parent()
    spec = json.loads(argv[0])
    pin(spec.get("cores"))
    try:
        from sharewise.profiler.progress import ENV_MAX_STEPS, ProgressWriter

        workload, _, sync = build(spec)
        target = int(os.environ[ENV_MAX_STEPS])
        writer = ProgressWriter.from_env()
        if writer is None:
            raise RuntimeError("no progress file named in the environment (SHAREWISE_PROGRESS)")
        with writer:
            while writer.steps < target:
                workload.step()
                sync()
                writer.step()
        # The job is done at its last step: leave without the interpreter's teardown (a torch process takes
        # about a second to unwind), so the slot is free when the work is. The OS frees every resource.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    except BaseException as exc:  # one line the driver records with the job; the traceback goes above it
        traceback.print_exc(limit=-3)
        status = "oom" if is_oom(exc) else "failed"
        print(f"{FAILURE_MARK}{status}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
