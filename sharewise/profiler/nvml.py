"""NVML sampler: SM and memory utilization, memory used, power, clock and PCIe throughput of one GPU."""

from __future__ import annotations

import threading
import time
from typing import Any

from sharewise.errors import DeviceError
from sharewise.stats import percentile

#: Default seconds between samples. NVML's utilization counters are themselves averaged over 1/6 s to 1 s,
#: so sampling much faster only repeats values.
DEFAULT_INTERVAL_S = 0.05

#: Sample field -> (feature name, aggregation). Unsupported metrics are None in samples.
_FIELDS = (
    ("sm_util", "f_nvml_sm_util_mean", "mean"),
    ("sm_util", "f_nvml_sm_util_p95", "p95"),
    ("mem_util", "f_nvml_mem_util_mean", "mean"),
    ("mem_used_bytes", "f_nvml_mem_used_bytes_max", "max"),
    ("power_w", "f_nvml_power_w_mean", "mean"),
    ("sm_clock_mhz", "f_nvml_sm_clock_mhz_mean", "mean"),
    ("pcie_tx_mbps", "f_nvml_pcie_tx_mbps_mean", "mean"),
    ("pcie_rx_mbps", "f_nvml_pcie_rx_mbps_mean", "mean"),
)


def summarize_samples(samples: list[dict[str, Any]]) -> dict[str, float]:
    """Aggregate NVML samples into features; a pure function.

    A metric the GPU does not report (``None`` in every sample, e.g. power on some boards) is left out
    rather than set to a made-up 0: a missing column is read as missing, a 0 would be read as a value.

    Parameters
    ----------
    samples : list of dict
        ``{"sm_util": 87.0, "mem_util": 40.0, "mem_used_bytes": 3.2e9, "power_w": 310.5,
        "sm_clock_mhz": 1980.0, "pcie_tx_mbps": 12.0, "pcie_rx_mbps": 30.0}`` per sample.

    Returns
    -------
    dict
        For example ``{"f_nvml_sm_util_mean": 85.5, "f_nvml_sm_util_p95": 99.0, ...,
        "f_nvml_samples": 20.0}``; ``f_nvml_samples`` is always present.
    """
    features: dict[str, float] = {}
    for field, name, how in _FIELDS:
        values = [float(s[field]) for s in samples if s.get(field) is not None]
        if not values:
            continue
        if how == "mean":
            features[name] = sum(values) / len(values)
        elif how == "max":
            features[name] = max(values)
        else:
            features[name] = percentile(values, 95.0)
    features["f_nvml_samples"] = float(len(samples))
    return features


class NvmlSampler:
    """Sample one NVIDIA GPU through NVML in a background thread between ``start()`` and ``stop()``.

    ``pynvml`` is imported in ``start()`` so that CPU-only machines import this module. ``device_index``
    is NVML's index, which differs from CUDA's under ``CUDA_VISIBLE_DEVICES``; ``nvml_index_for_cuda``
    maps one to the other.

    Examples
    --------
    >>> sampler = NvmlSampler(0)          # doctest: +SKIP
    >>> sampler.start()                   # doctest: +SKIP
    >>> run_steps()                       # doctest: +SKIP
    >>> sampler.stop()["f_nvml_sm_util_mean"]  # doctest: +SKIP
    93.4
    """

    def __init__(self, device_index: int, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        if not isinstance(device_index, int) or device_index < 0:
            raise ValueError(f"device_index must be a non-negative integer, got {device_index!r}")
        if not interval_s > 0:
            raise ValueError(f"interval_s must be positive, got {interval_s!r}")
        self.device_index = device_index
        self.interval_s = float(interval_s)
        self._thread: threading.Thread | None = None
        self._stop_event = threading.Event()
        self._samples: list[dict[str, Any]] = []
        self._error: BaseException | None = None
        self._nvml: Any = None

    def start(self) -> None:
        """Initialize NVML and start sampling.

        Raises ``RuntimeError`` if already started, and ``sharewise.errors.DeviceError`` ("NVML
        unavailable: ...") when pynvml, the driver or the device is missing; the caller decides to skip.
        """
        if self._thread is not None:
            raise RuntimeError("NvmlSampler.start() called twice; call stop() before starting again")
        try:
            import pynvml
        except ImportError as exc:
            raise DeviceError(
                f"NVML unavailable: cannot import pynvml ({exc}); install nvidia-ml-py"
            ) from None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise DeviceError(
                f"NVML unavailable: nvmlInit failed ({exc}); is the NVIDIA driver installed and loaded?"
            ) from None
        try:
            count = pynvml.nvmlDeviceGetCount()
            if self.device_index >= count:
                raise DeviceError(
                    f"NVML unavailable: device index {self.device_index} out of range, "
                    f"NVML sees {count} GPU(s)"
                )
            handle = pynvml.nvmlDeviceGetHandleByIndex(self.device_index)
        except pynvml.NVMLError as exc:
            pynvml.nvmlShutdown()
            raise DeviceError(f"NVML unavailable: cannot open GPU {self.device_index} ({exc})") from None
        except DeviceError:
            pynvml.nvmlShutdown()
            raise
        self._nvml = pynvml
        self._samples = []
        self._error = None
        self._stop_event.clear()
        self._thread = threading.Thread(
            target=self._run, args=(pynvml, handle), name="sharewise-nvml", daemon=True
        )
        self._thread.start()

    def _run(self, pynvml: Any, handle: Any) -> None:
        unsupported: set[str] = set()

        def read(field: str, fn):
            # A metric a board does not support raises every time: stop asking after the first refusal.
            if field in unsupported:
                return None
            try:
                return fn()
            except pynvml.NVMLError_NotSupported:
                unsupported.add(field)
                return None
            except pynvml.NVMLError:
                return None

        def pcie(counter):
            return pynvml.nvmlDeviceGetPcieThroughput(handle, counter)

        try:
            while not self._stop_event.is_set():
                t0 = time.monotonic()
                util = read("util", lambda: pynvml.nvmlDeviceGetUtilizationRates(handle))
                mem = read("mem", lambda: pynvml.nvmlDeviceGetMemoryInfo(handle))
                power = read("power", lambda: pynvml.nvmlDeviceGetPowerUsage(handle))
                clock = read("clock", lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
                # PCIe counters are KB/s over a 20 ms window; each call blocks for that window.
                tx = read("tx", lambda: pcie(pynvml.NVML_PCIE_UTIL_TX_BYTES))
                rx = read("rx", lambda: pcie(pynvml.NVML_PCIE_UTIL_RX_BYTES))
                self._samples.append(
                    {
                        "t": t0,
                        "sm_util": None if util is None else float(util.gpu),
                        "mem_util": None if util is None else float(util.memory),
                        "mem_used_bytes": None if mem is None else float(mem.used),
                        "power_w": None if power is None else power / 1000.0,
                        "sm_clock_mhz": None if clock is None else float(clock),
                        "pcie_tx_mbps": None if tx is None else tx / 1000.0,
                        "pcie_rx_mbps": None if rx is None else rx / 1000.0,
                    }
                )
                self._stop_event.wait(max(0.0, self.interval_s - (time.monotonic() - t0)))
        except BaseException as exc:  # surfaced by stop(), not lost in a thread
            self._error = exc

    def stop(self) -> dict[str, float]:
        """Stop sampling and return ``summarize_samples`` of the samples; raises ``RuntimeError`` if not
        started, or if the sampling thread failed."""
        if self._thread is None:
            raise RuntimeError("NvmlSampler.stop() called before start(); call start() first")
        self._stop_event.set()
        self._thread.join()
        self._thread = None
        try:
            self._nvml.nvmlShutdown()
        except Exception:  # shutting down is best effort; the samples are already taken
            pass
        self._nvml = None
        if self._error is not None:
            raise RuntimeError(f"NVML sampling thread failed: {self._error!r}") from self._error
        return summarize_samples(self._samples)

    @property
    def samples(self) -> list[dict[str, Any]]:
        """The raw samples of the last run (a copy)."""
        return list(self._samples)


def nvml_index_for_cuda(cuda_index: int) -> int:
    """Return the NVML index of CUDA device ``cuda_index`` (they differ under ``CUDA_VISIBLE_DEVICES``).

    Matches the device UUID that torch reports with NVML's; falls back to ``cuda_index`` when either
    side cannot tell. Raises ``DeviceError`` when NVML is unavailable.
    """
    import torch

    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:
        raise DeviceError(f"NVML unavailable: {exc}") from None
    try:
        uuid = str(getattr(torch.cuda.get_device_properties(cuda_index), "uuid", "") or "")
        if not uuid:
            return cuda_index
        uuid = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
        for i in range(pynvml.nvmlDeviceGetCount()):
            nv_uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
            if isinstance(nv_uuid, bytes):
                nv_uuid = nv_uuid.decode()
            if nv_uuid == uuid:
                return i
        return cuda_index
    except Exception:  # any mismatch of APIs between versions: the plain index is right without masking
        return cuda_index
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
