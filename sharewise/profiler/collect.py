"""Features of a solo profile, computed inside the worker process on its built, warmed-up workload."""

from __future__ import annotations


def worker_features(workload, spec: dict, device, trace_steps: int) -> dict:
    """Return the ``f_*`` features of ``workload`` (built and warmed up on ``device``), all finite.

    Adds ``f_device_mem_bytes`` (RAM on CPU, GPU memory on CUDA) so the predictor can judge whether two
    jobs fit together on the device.
    """
    from sharewise.profiler.device import total_memory_bytes
    from sharewise.profiler.features import assert_finite, solo_features

    feats = solo_features(workload, device, trace_steps=trace_steps)
    feats["f_device_mem_bytes"] = total_memory_bytes(str(device))
    assert_finite(feats, f"features of {spec['spec']!r} on {device}")
    return feats
