"""Profiler: workloads, solo profiles with features, and pair co-location runs."""
