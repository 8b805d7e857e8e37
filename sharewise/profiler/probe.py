"""The probe: a fixed synthetic co-runner that measures a job's sensitivity and pressure in its solo profile.

Bubble-Up (Mars et al., MICRO'11) predicts co-location slowdowns without running every pair: each job is run
once next to a known "bubble" load. How much the job slows down there is its *sensitivity*; how much it slows
the bubble down is its *pressure*. A pair's slowdowns are then estimated from the sensitivity of one and the
pressure of the other. ``profile_workload`` runs every job next to this probe once per repeat (one extra
window), so a new model still needs one solo profile, not a pair run against every other model.

The probe steps a dense matrix product (compute units) and a pass over a buffer several times the last-level
cache (memory bandwidth), the two resources DL training jobs fight over, with the same threads a workload gets.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from sharewise.profiler.workloads.base import Workload

#: Spec the worker loads for the probe (``module:Class``, not in the workload registry).
PROBE_SPEC = "sharewise.profiler.probe:Probe"

# (matrix side, streamed floats) per device kind: a CPU step of about 3 ms on 2 cores (32 MB streamed); on a GPU
# a 4096^3 product and 256 MB streamed (several times any L2), about 0.6 GB of device memory in all.
_SHAPES = {"cpu": (512, 8 * 1024 * 1024), "cuda": (4096, 64 * 1024 * 1024)}


class Probe(Workload):
    """Matrix product plus a streaming elementwise pass, on fixed synthetic tensors; no optimizer."""

    name: ClassVar[str] = "probe"
    family: ClassVar[str] = "probe"
    default_batch_size: ClassVar[int] = 1
    kind: ClassVar[str] = "infer"
    description: ClassVar[str] = "sharewise's fixed co-runner for sensitivity and pressure features"

    def build(self, device: Any) -> None:
        self.device = torch.device(device)
        side, stream = _SHAPES["cuda" if self.device.type == "cuda" else "cpu"]
        gen = torch.Generator().manual_seed(0)
        self.a = torch.randn(side, side, generator=gen).to(self.device)
        self.b = torch.randn(side, side, generator=gen).to(self.device)
        self.buf = torch.randn(stream, generator=gen).to(self.device)
        self.out = torch.empty_like(self.buf)

    def step(self) -> None:
        with torch.no_grad():
            c = self.a @ self.b
            self.a.copy_(c.clamp_(-1.0, 1.0))
            torch.mul(self.buf, 1.0001, out=self.out)
            self.buf, self.out = self.out, self.buf
