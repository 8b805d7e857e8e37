"""Peak memory of a tracked region: CUDA allocator peaks on GPUs, resident-set growth on CPUs."""

from __future__ import annotations

import os
import resource
import sys
import threading
from typing import Any

#: Seconds between two RSS samples on CPU.
RSS_INTERVAL_S = 0.005


def _ru_maxrss_bytes() -> int:
    # ru_maxrss is KiB on Linux and bytes on macOS.
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


class MemoryTracker:
    """Track the peak memory of a region of code on one device.

    On CUDA, the allocator's own peaks (``torch.cuda.reset_peak_memory_stats`` at ``start()``, then
    ``max_memory_allocated`` and ``max_memory_reserved``): exact and cheap. On CPU, the growth of the
    process's resident set: a daemon thread samples RSS (``psutil``) every ``RSS_INTERVAL_S`` seconds, and
    ``resource.getrusage``'s lifetime peak serves as a floor when it rose during the region (a new
    lifetime peak can only have happened inside it), which catches spikes shorter than the interval.

    Caveats on CPU: RSS is the whole process (other threads allocating at the same time count too);
    memory the allocator keeps after a free (glibc arenas, the oneDNN cache) does not show as growth when
    it is reused, so a warmed-up workload shows its transient activations rather than its whole
    footprint; pages swapped out do not count.

    Examples
    --------
    >>> tracker = MemoryTracker("cpu")
    >>> tracker.start()
    >>> buf = b"x" * 50_000_000  # written, so its pages are resident
    >>> tracker.stop()["f_mem_rss_growth_bytes"] > 0
    True
    """

    def __init__(self, device: Any) -> None:
        self.device = device
        self._running = False
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._rss_start = 0
        self._rss_peak = 0
        self._maxrss_start = 0
        self._kind = ""

    def _device_kind(self) -> str:
        kind = getattr(self.device, "type", None) or str(self.device).split(":")[0]
        if kind not in ("cpu", "cuda"):
            raise ValueError(f"MemoryTracker tracks 'cpu' or 'cuda' devices, got {str(self.device)!r}")
        return kind

    def start(self) -> None:
        """Begin tracking; raises ``RuntimeError`` if already started."""
        if self._running:
            raise RuntimeError("MemoryTracker.start() called twice; call stop() before starting again")
        self._kind = self._device_kind()
        if self._kind == "cuda":
            import torch

            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            import psutil

            process = psutil.Process(os.getpid())
            self._rss_start = process.memory_info().rss
            self._rss_peak = self._rss_start
            self._maxrss_start = _ru_maxrss_bytes()
            self._stop_event.clear()
            self._thread = threading.Thread(
                target=self._sample_rss, args=(process,), name="sharewise-rss", daemon=True
            )
            self._thread.start()
        self._running = True

    def _sample_rss(self, process: Any) -> None:
        while not self._stop_event.is_set():
            rss = process.memory_info().rss
            if rss > self._rss_peak:
                self._rss_peak = rss
            self._stop_event.wait(RSS_INTERVAL_S)

    def stop(self) -> dict[str, float]:
        """End tracking and return the features; raises ``RuntimeError`` if not started.

        Returns
        -------
        dict
            On CUDA ``{"f_mem_peak_allocated_bytes": 1.2e9, "f_mem_peak_reserved_bytes": 1.4e9}``, on CPU
            ``{"f_mem_rss_growth_bytes": 3.1e7}``.
        """
        if not self._running:
            raise RuntimeError("MemoryTracker.stop() called before start(); call start() first")
        self._running = False
        if self._kind == "cuda":
            import torch

            torch.cuda.synchronize(self.device)
            return {
                "f_mem_peak_allocated_bytes": float(torch.cuda.max_memory_allocated(self.device)),
                "f_mem_peak_reserved_bytes": float(torch.cuda.max_memory_reserved(self.device)),
            }
        import psutil

        self._stop_event.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        peak = max(self._rss_peak, psutil.Process(os.getpid()).memory_info().rss)
        maxrss = _ru_maxrss_bytes()
        if maxrss > self._maxrss_start:
            peak = max(peak, maxrss)
        return {"f_mem_rss_growth_bytes": float(max(peak - self._rss_start, 0))}
