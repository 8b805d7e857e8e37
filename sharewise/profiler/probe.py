"""The probe: a fixed synthetic co-runner that measures a job's sensitivity and pressure in its solo profile.

Bubble-Up (Mars et al., MICRO'11) predicts co-location slowdowns without running every pair: each job is run
once next to a known "bubble" load. How much the job slows down there is its *sensitivity*; how much it slows
the bubble down is its *pressure*. A pair's slowdowns are then estimated from the sensitivity of one and the
pressure of the other. ``profile_workload`` runs every job next to this probe once per repeat (one extra
window), so a new model still needs one solo profile, not a pair run against every other model.

Each probe step loads the three resources DL training jobs fight over, in the spirit of the GPU stress kernels
of the SoCC'25 interference study (compute, L2, memory bandwidth) and Bubble-Up's tunable bubble:

1. compute: a dense matrix product (``side`` x ``side``, float32 like the zoo's training);
2. the last-level cache: ``l2_passes`` in-place passes over a buffer of half the cache;
3. memory bandwidth: one streaming pass over a buffer several times the cache.

The shape is read from the device (``cuda_shape``: its L2 size, memory and SM count), never measured, so two
profiles on the same device run the same probe; on CPUs it is fixed (``CPU_SHAPE``). This module imports no
torch until a probe is built, so the driver can name ``PROBE_SPEC`` cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from sharewise.profiler.workloads.base import Workload

#: Spec the worker loads for the probe (``module:Class``, not in the workload registry).
PROBE_SPEC = "sharewise.profiler.probe:Probe"


@dataclass(frozen=True)
class ProbeShape:
    """Sizes of one probe step: matrix side, L2-resident floats and passes, streamed floats."""

    side: int
    l2_floats: int
    l2_passes: int
    stream_floats: int

    def device_bytes(self) -> int:
        """Device memory the probe's tensors take (four bytes a float): 3 matrices, the L2 buffer, 2 streams."""
        return 4 * (3 * self.side * self.side + self.l2_floats + 2 * self.stream_floats)


#: A CPU step of about 10 ms on 2 cores: a 512^3 product and 32 MB streamed (a few times a server's L3
#: share); the cache part is left out, since CPUs' last-level caches differ too much to size one portably.
CPU_SHAPE = ProbeShape(side=512, l2_floats=0, l2_passes=0, stream_floats=8 * 1024 * 1024)


def cuda_shape(l2_bytes: int, total_bytes: int, sm_count: int) -> ProbeShape:
    """Size the probe for one GPU from its L2 cache, memory and SM count (a pure function).

    The product is 4096 wide on GPUs with 64 SMs or more (about 2 ms in float32 on an H100-class GPU,
    enough blocks for every SM), 2048 below; the L2 buffer is half the L2, passed over 8 times; the stream
    is 8 times the L2 but at least 256 MB, and at most 1/64 of the device memory so the probe fits beside
    any job that leaves it room.

    >>> cuda_shape(l2_bytes=50 * 2**20, total_bytes=80 * 2**30, sm_count=132)
    ProbeShape(side=4096, l2_floats=6553600, l2_passes=8, stream_floats=104857600)
    >>> cuda_shape(l2_bytes=4 * 2**20, total_bytes=8 * 2**30, sm_count=20).stream_floats * 4 // 2**20
    128
    """
    side = 4096 if sm_count >= 64 else 2048
    l2_floats = max(1, l2_bytes // 2 // 4)
    stream_bytes = min(max(8 * l2_bytes, 256 * 2**20), max(1, total_bytes // 64))
    return ProbeShape(side=side, l2_floats=l2_floats, l2_passes=8, stream_floats=max(1, stream_bytes // 4))


def shape_for(device: Any) -> ProbeShape:
    """The probe's shape on ``device`` (a ``torch.device``): ``CPU_SHAPE``, or ``cuda_shape`` of its properties."""
    if device.type != "cuda":
        return CPU_SHAPE
    import torch

    props = torch.cuda.get_device_properties(device)
    l2 = int(getattr(props, "L2_cache_size", 0) or 40 * 2**20)
    return cuda_shape(l2, int(props.total_memory), int(props.multi_processor_count))


class Probe(Workload):
    """Matrix product, L2 passes and a streaming pass on fixed synthetic tensors; no optimizer."""

    name: ClassVar[str] = "probe"
    family: ClassVar[str] = "probe"
    default_batch_size: ClassVar[int] = 1
    kind: ClassVar[str] = "infer"
    description: ClassVar[str] = "sharewise's fixed co-runner for sensitivity and pressure features"

    def build(self, device: Any) -> None:
        import torch

        self._torch = torch
        self.device = torch.device(device)
        self.shape = shape_for(self.device)
        side = self.shape.side
        gen = torch.Generator().manual_seed(0)
        self.a = torch.randn(side, side, generator=gen).to(self.device)
        self.b = torch.randn(side, side, generator=gen).to(self.device)
        self.l2 = torch.randn(self.shape.l2_floats, generator=gen).to(self.device) if self.shape.l2_passes else None
        self.buf = torch.randn(self.shape.stream_floats, generator=gen).to(self.device)
        self.out = torch.empty_like(self.buf)

    def step(self) -> None:
        torch = self._torch
        with torch.no_grad():
            c = self.a @ self.b
            self.a.copy_(c.clamp_(-1.0, 1.0))
            for _ in range(self.shape.l2_passes):
                self.l2.mul_(0.9999)
            torch.mul(self.buf, 1.0001, out=self.out)
            self.buf, self.out = self.out, self.buf

    def close(self) -> None:
        self._torch = None
        super().close()
