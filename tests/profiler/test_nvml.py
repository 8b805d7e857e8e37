"""NVML sampler: the pure aggregation, refusal of misuse, and a real GPU when one is present."""

from __future__ import annotations

import sys
import time
import types

import pytest
from conftest import fake_pynvml_base

from sharewise.errors import DeviceError
from sharewise.profiler.nvml import NvmlSampler, summarize_samples


def _sample(sm, mem, used, power, clock, tx, rx):
    return {"sm_util": sm, "mem_util": mem, "mem_used_bytes": used, "power_w": power,
            "sm_clock_mhz": clock, "pcie_tx_mbps": tx, "pcie_rx_mbps": rx}


def test_summarize_samples_literal():
    samples = [
        _sample(0.0, 10.0, 1.0e9, 100.0, 1000.0, 1.0, 4.0),
        _sample(50.0, 20.0, 3.0e9, 200.0, 1500.0, 2.0, 5.0),
        _sample(100.0, 30.0, 2.0e9, 300.0, 2000.0, 3.0, 6.0),
    ]
    f = summarize_samples(samples)
    assert f == {
        "f_nvml_sm_util_mean": 50.0,
        # sorted [0, 50, 100], rank 2 * 0.95 = 1.9: 50 + 0.9 * 50
        "f_nvml_sm_util_p95": 95.0,
        "f_nvml_mem_util_mean": 20.0,
        "f_nvml_mem_used_bytes_max": 3.0e9,
        "f_nvml_power_w_mean": 200.0,
        "f_nvml_sm_clock_mhz_mean": 1500.0,
        "f_nvml_pcie_tx_mbps_mean": 2.0,
        "f_nvml_pcie_rx_mbps_mean": 5.0,
        "f_nvml_samples": 3.0,
    }


def test_summarize_samples_leaves_out_unsupported_metrics():
    samples = [_sample(10.0, 5.0, 1.0e9, None, 1400.0, None, None),
               _sample(30.0, 5.0, 1.0e9, None, 1400.0, None, None)]
    f = summarize_samples(samples)
    assert "f_nvml_power_w_mean" not in f and "f_nvml_pcie_tx_mbps_mean" not in f
    assert f["f_nvml_sm_util_mean"] == 20.0 and f["f_nvml_samples"] == 2.0
    assert summarize_samples([]) == {"f_nvml_samples": 0.0}


def _fake_pynvml(*, init_fails=False, power_supported=True):
    """A stand-in for pynvml with the calls the sampler makes."""
    mod = fake_pynvml_base(init_fails)

    class NVMLError_NotSupported(mod.NVMLError):  # noqa: N801 - pynvml's spelling
        pass

    mod.NVMLError_NotSupported = NVMLError_NotSupported
    mod.NVML_CLOCK_SM = 1
    mod.NVML_PCIE_UTIL_TX_BYTES = 0
    mod.NVML_PCIE_UTIL_RX_BYTES = 1

    def power(handle):
        if not power_supported:
            raise NVMLError_NotSupported("Not Supported")
        return 250_000  # mW

    mod.nvmlDeviceGetCount = lambda: 1
    mod.nvmlDeviceGetHandleByIndex = lambda i: ("handle", i)
    mod.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=80, memory=30)
    mod.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=2_000_000_000, total=8e9, free=6e9)
    mod.nvmlDeviceGetPowerUsage = power
    mod.nvmlDeviceGetClockInfo = lambda h, clock: 1800
    mod.nvmlDeviceGetPcieThroughput = lambda h, counter: 5000 if counter == 0 else 12000  # KB/s
    return mod


def test_sampler_refuses_misuse_and_samples(monkeypatch):
    fake = _fake_pynvml(power_supported=False)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    sampler = NvmlSampler(0, interval_s=0.005)
    with pytest.raises(RuntimeError, match="before start"):
        sampler.stop()
    sampler.start()
    with pytest.raises(RuntimeError, match="twice"):
        sampler.start()
    time.sleep(0.03)
    f = sampler.stop()
    assert fake.inits == 0  # every nvmlInit matched by a shutdown
    assert f["f_nvml_samples"] >= 1
    assert f["f_nvml_sm_util_mean"] == 80.0 and f["f_nvml_mem_util_mean"] == 30.0
    assert f["f_nvml_mem_used_bytes_max"] == 2e9
    assert f["f_nvml_sm_clock_mhz_mean"] == 1800.0
    assert f["f_nvml_pcie_tx_mbps_mean"] == 5.0 and f["f_nvml_pcie_rx_mbps_mean"] == 12.0
    assert "f_nvml_power_w_mean" not in f  # this fake board does not report power
    with pytest.raises(RuntimeError, match="before start"):
        sampler.stop()
    sampler.start()  # a stopped sampler can run again
    assert sampler.stop()["f_nvml_samples"] >= 1


def test_sampler_reports_missing_nvml_as_device_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    with pytest.raises(DeviceError, match="NVML unavailable"):
        NvmlSampler(0).start()
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(init_fails=True))
    with pytest.raises(DeviceError, match="NVML unavailable.*driver"):
        NvmlSampler(0).start()
    fake = _fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with pytest.raises(DeviceError, match="out of range"):
        NvmlSampler(3).start()
    assert fake.inits == 0


def test_sampler_rejects_bad_arguments():
    with pytest.raises(ValueError, match="device_index"):
        NvmlSampler(-1)
    with pytest.raises(ValueError, match="interval_s"):
        NvmlSampler(0, interval_s=0)


def _gpu_or_skip():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU: torch.cuda.is_available() is False")
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    except Exception as exc:
        pytest.skip(f"needs NVML: pynvml init failed ({exc})")
    return torch


@pytest.mark.gpu
def test_sampler_sees_a_busy_gpu():
    torch = _gpu_or_skip()
    from sharewise.profiler.nvml import nvml_index_for_cuda

    a = torch.randn(4096, 4096, device="cuda")
    sampler = NvmlSampler(nvml_index_for_cuda(torch.cuda.current_device()), interval_s=0.02)
    sampler.start()
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        for _ in range(10):
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
    f = sampler.stop()
    assert f["f_nvml_samples"] >= 5
    assert f["f_nvml_sm_util_mean"] > 0
    assert f["f_nvml_mem_used_bytes_max"] > 4096 * 4096 * 4
