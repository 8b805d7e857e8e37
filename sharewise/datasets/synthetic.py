"""Seeded synthetic profiles and measured pairs at any scale, for benchmarks and scale tests of the predictor."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

#: The feature columns of a GPU profile (device-independent counts, kernel timeline, memory, NVML, probe, op mix).
GPU_LIKE_FEATURES = tuple(
    [
        "f_flops_per_step",
        "f_param_bytes",
        "f_activation_bytes",
        "f_arith_intensity",
        "f_batch_size",
        "f_ops_per_step_static",
        "f_step_time_ms",
        "f_achieved_flop_rate",
        "f_busy_frac",
        "f_launch_rate",
        "f_kernels_per_step",
        "f_kernel_mean_us",
        "f_kernel_p95_us",
        "f_kernel_p99_us",
        "f_mem_peak_allocated_bytes",
        "f_mem_peak_reserved_bytes",
        "f_device_mem_bytes",
        "f_nvml_sm_util_mean",
        "f_nvml_sm_util_p95",
        "f_nvml_mem_util_mean",
        "f_nvml_mem_used_bytes_max",
        "f_nvml_power_w_mean",
        "f_nvml_sm_clock_mhz_mean",
        "f_nvml_pcie_rx_mbps_mean",
        "f_nvml_pcie_tx_mbps_mean",
        "f_probe_slowdown",
        "f_probe_pressure",
    ]
    + [f"f_opshare_{c}" for c in ("gemm_conv", "elementwise", "reduction", "normalization")]
    + [f"f_opshare_{c}" for c in ("embedding", "data_movement", "optimizer", "other")]
    + [f"f_timeshare_{c}" for c in ("gemm_conv", "elementwise", "reduction", "normalization")]
    + [f"f_timeshare_{c}" for c in ("embedding", "data_movement", "optimizer", "other")]
)


def synthetic_tables(
    n_workloads: int, n_pairs: int, seed: int = 0, features: Sequence[str] = GPU_LIKE_FEATURES
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Return profiles of ``n_workloads`` workloads on one GPU-like device and ``n_pairs`` measured pairs drawn
    among them, all from ``numpy.random.Generator(seed)``.

    ``features`` (log-normal values) default to a GPU-like set of 43 ``f_*`` columns; ``f_busy_frac`` and
    ``f_probe_slowdown`` are always drawn, and both slowdowns of a pair are ``max(1, busy_a + busy_b)`` times
    5% noise, a pattern a model can learn. Example (two of many rows)::

        profiles: workload  family  device_name  f_busy_frac  f_probe_slowdown  iter_time_ms  ...
                  w0        fam0    gpu          0.73         1.84              21.4
        pairs:    workload_a  workload_b  device_name  slowdown_a  slowdown_b  status
                  w17         w3          gpu          1.41        1.38        ok
    """
    rng = np.random.default_rng(seed)
    names = [f"w{i}" for i in range(n_workloads)]
    values = rng.lognormal(0, 1, (n_workloads, len(features)))
    profiles = pd.DataFrame(values, columns=list(features))
    profiles["f_busy_frac"] = rng.uniform(0.1, 1.0, n_workloads)
    # The probe sensitivity is the model's offset (base margin): the default model's full prediction path.
    profiles["f_probe_slowdown"] = rng.uniform(1.0, 2.5, n_workloads)
    step = rng.lognormal(3, 1, n_workloads)
    profiles = profiles.assign(
        workload=names,
        family=[f"fam{i % 20}" for i in range(n_workloads)],
        batch_size=32,
        device_kind="cuda",
        device_name="gpu",
        mode="timeslice",
        host="h",
        torch_version="2",
        created_at="2024-01-01T00:00:00",
        iter_time_ms=step,
        throughput=1000.0 / step,
    )
    a = rng.integers(0, n_workloads, n_pairs)
    b = rng.integers(0, n_workloads, n_pairs)
    busy = profiles["f_busy_frac"].to_numpy()
    sa = np.maximum(1.0, busy[a] + busy[b]) * rng.lognormal(0, 0.05, n_pairs)
    sb = np.maximum(1.0, busy[a] + busy[b]) * rng.lognormal(0, 0.05, n_pairs)
    pairs = pd.DataFrame(
        {
            "workload_a": np.array(names)[a],
            "workload_b": np.array(names)[b],
            "device_name": "gpu",
            "slowdown_a": sa,
            "slowdown_b": sb,
            "status": "ok",
        }
    )
    return profiles, pairs
