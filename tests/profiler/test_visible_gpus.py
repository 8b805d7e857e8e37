"""Which GPUs ``CUDA_VISIBLE_DEVICES`` shows, read through NVML as CUDA reads it, and every call site using it.

There is no GPU here, so the one thing faked is what cannot exist on this machine: the NVML library. The fake
``pynvml`` below stands for a GPU machine's NVML with three GPUs of distinct UUIDs and memory (GPUs 0 and 1
share the UUID prefix ``GPU-5c1d``, GPUs 0 and 2 are of one kind), so each case can be checked by hand.
Everything above NVML (the parsing, the layout, the process memory) is the real code.
"""

from __future__ import annotations

import sys
import types

import pytest
from conftest import fake_pynvml_base

from sharewise.errors import ConfigError, DeviceError
from sharewise.profiler import device, job_process
from sharewise.runtime import slots

GiB = 2**30
UUIDS = (
    "GPU-5c1d6f0e-8a4b-4c2d-9e1f-0a1b2c3d4e5f",
    "GPU-5c1d9a2b-7f3e-4b1a-8c2d-1b2c3d4e5f60",
    "GPU-8e7f3a41-2b6c-4d8e-a0f1-2c3d4e5f6071",
)
NAMES = ("NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA H200")
TOTALS = (141 * GiB, 80 * GiB, 139 * GiB)  # distinct, so a test sees which GPU was read
#: NVML GPU -> (pid, bytes) of its compute processes; pid 111 runs on GPUs 0 and 2.
PROCESSES = ({111: 1 * GiB}, {222: 2 * GiB}, {111: 3 * GiB, 333: 5 * GiB})


def _fake_pynvml(*, init_fails: bool = False) -> types.ModuleType:
    """A GPU machine's NVML, as far as sharewise asks it (nvmlInit counts, so a test checks every init is shut)."""
    mod = fake_pynvml_base(init_fails)
    NVMLError = mod.NVMLError

    def handle(i):
        if not 0 <= i < len(UUIDS):
            raise NVMLError("Invalid Argument")
        return ("handle", i)

    mod.nvmlDeviceGetCount = lambda: len(UUIDS)
    mod.nvmlDeviceGetHandleByIndex = handle
    mod.nvmlDeviceGetUUID = lambda h: UUIDS[h[1]]
    mod.nvmlDeviceGetName = lambda h: NAMES[h[1]].encode()  # older pynvml returns bytes
    mod.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(
        total=TOTALS[h[1]], free=TOTALS[h[1]] - GiB, used=GiB
    )
    mod.nvmlDeviceGetComputeRunningProcesses = lambda h: [
        types.SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in PROCESSES[h[1]].items()
    ]
    return mod


@pytest.fixture
def nvml(monkeypatch):
    fake = _fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    yield fake
    assert fake.inits == 0  # every nvmlInit was matched by a shutdown


def _visible(monkeypatch, value: str | None) -> list[tuple[int, str]]:
    """``(nvml_index, entry)`` of each visible GPU under ``CUDA_VISIBLE_DEVICES=value`` (None: unset)."""
    if value is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    gpus = device.visible_gpus()
    assert [g.cuda_index for g in gpus] == list(range(len(gpus)))
    return [(g.nvml_index, g.entry) for g in gpus]


def test_unset_shows_every_gpu_in_nvml_order(nvml, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert device.visible_gpus() == [
        device.VisibleGpu(0, 0, UUIDS[0], "NVIDIA H200", "0"),
        device.VisibleGpu(1, 1, UUIDS[1], "NVIDIA H100 80GB HBM3", "1"),
        device.VisibleGpu(2, 2, UUIDS[2], "NVIDIA H200", "2"),
    ]
    assert device.gpu_names() == list(NAMES)


def test_indices_map_cuda_ordinals_to_nvml_indices(nvml, monkeypatch):
    assert _visible(monkeypatch, "2,0") == [(2, "2"), (0, "0")]
    assert _visible(monkeypatch, " 2 , 0 ") == [(2, "2"), (0, "0")]
    assert device.gpu_names() == ["NVIDIA H200", "NVIDIA H200"]
    assert device.nvml_index("cuda:1") == 0 and device.nvml_index("cuda") == 2
    assert device.nvml_index("cuda:2") is None


def test_uuids_full_and_unique_prefixes(nvml, monkeypatch):
    assert _visible(monkeypatch, f"{UUIDS[2]},{UUIDS[0]},{UUIDS[1]}") == [
        (2, UUIDS[2]), (0, UUIDS[0]), (1, UUIDS[1])
    ]
    # A prefix CUDA accepts is passed on as the full UUID, which stays unique.
    assert _visible(monkeypatch, "GPU-8e7f,GPU-5c1d6") == [(2, UUIDS[2]), (0, UUIDS[0])]
    assert device.gpu_names() == ["NVIDIA H200", "NVIDIA H200"]
    assert _visible(monkeypatch, UUIDS[2].upper()) == [(2, UUIDS[2])]


# Odd forms, as the CUDA driver itself (580, one H200) read their one-GPU versions: "+0", "0abc", "GPU-", an
# upper-case UUID, one without GPU-, and "GPU-<uuid>,0" / "0,GPU-<prefix>" showing that GPU (not none, as a
# GPU listed twice would): the first entry sets the kind of the list, as torch reads CUDA's rule too.
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("+2,0abc", [(2, "2"), (0, "0")]),  # indices are read as strtoul reads them
        ("0,GPU-8e7f", [(0, "0")]),  # the first entry sets the kind of the list: a UUID ends a list of indices
        ("GPU-8e7f,1", [(2, UUIDS[2])]),  # and an index ends a list of UUIDs
        ("GPU-", []),  # a UUID prefix needs at least one character of the UUID
        (UUIDS[2][4:], []),  # a UUID without GPU-
    ],
)
def test_entries_read_as_the_cuda_driver_reads_them(nvml, monkeypatch, value, expected):
    assert _visible(monkeypatch, value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("GPU-8e7f,GPU-5c1d,0", [(2, UUIDS[2])]),  # GPU-5c1d matches GPUs 0 and 1: CUDA stops there
        ("1,GPU-0000dead,0", [(1, "1")]),  # a UUID that matches no GPU
        ("1,3,0", [(1, "1")]),  # an index out of range
        ("1,MIG-5c1d6f0e-0000-0000-0000-000000000000,0", [(1, "1")]),  # MIG slices: not run on, stop
        ("MIG-5c1d6f0e-0000-0000-0000-000000000000", []),
        ("1,,0", [(1, "1")]),
        ("", []),
        ("2,0,2", []),  # a GPU listed twice: CUDA shows none
        (f"GPU-5c1d6,{UUIDS[0]}", []),
    ],
)
def test_cuda_stops_at_the_first_invalid_entry(nvml, monkeypatch, value, expected):
    assert _visible(monkeypatch, value) == expected


def test_no_nvml_means_no_visible_gpu(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    assert device.visible_gpus() == [] and device.gpu_names() == [] and device.nvml_index("cuda:0") is None
    assert device.device_memory("cuda:0") == (float("inf"), float("inf"))
    assert job_process.cuda_visible(1) == "0"  # the driver's own entry, passed on as written
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(init_fails=True))
    assert device.visible_gpus() == []


def test_unreadable_gpu_is_a_device_error(nvml, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def lost(h):
        raise nvml.NVMLError("GPU is lost")

    monkeypatch.setattr(nvml, "nvmlDeviceGetUUID", lost)
    with pytest.raises(DeviceError, match="cannot read GPU 0.*nvidia-smi"):
        device.visible_gpus()


def test_cuda_layout_under_uuids_passes_uuids_and_reads_the_right_gpu(nvml, monkeypatch):
    # Before visible_gpus, UUIDs were taken as the first GPUs in NVML's order (here two kinds: refused) and
    # the slots kept digit entries only (no device at all).
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{UUIDS[2]},{UUIDS[0]}")
    lay = slots.cuda_layout()
    assert [(s.index, s.cuda, s.entry) for s in lay.slots] == [(0, 0, UUIDS[2]), (1, 1, UUIDS[0])]
    assert lay.device_name == "NVIDIA H200" and lay.memory_bytes == TOTALS[2]  # cuda:0 is NVML's GPU 2
    assert lay.job_place([1])[2] == UUIDS[0]
    assert lay.job_place([0, 1])[2] == f"{UUIDS[2]},{UUIDS[0]}"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-8e7f")
    lay = slots.cuda_layout()
    assert lay.job_place([0])[2] == UUIDS[2] and lay.memory_bytes == TOTALS[2]


def test_cuda_layout_under_indices(nvml, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    lay = slots.cuda_layout("mps")
    assert [(s.cuda, s.entry) for s in lay.slots] == [(0, "2"), (1, "0")]
    assert lay.job_place([1, 0])[2] == "0,2" and lay.memory_bytes == TOTALS[2]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-5c1d")
    with pytest.raises(ConfigError, match="no NVIDIA GPU.*CUDA_VISIBLE_DEVICES='GPU-5c1d'.*nvidia-smi -L"):
        slots.cuda_layout()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with pytest.raises(ConfigError, match="different kinds"):
        slots.cuda_layout()


def test_slot_without_entry_passes_its_cuda_index():
    lay = slots.Layout("cuda", "timeslice", (slots.Slot(0, (0,), 1, 3), slots.Slot(1, (0,), 1, 1)), "GPU")
    assert lay.job_place([0, 1]) == ((0,), 1, "3,1")


def test_device_memory_reads_the_nvml_gpu_of_the_cuda_ordinal(nvml, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    assert device.device_memory("cuda:1") == (TOTALS[0], TOTALS[0] - GiB)
    assert device.device_memory("cuda:0") == (TOTALS[2], TOTALS[2] - GiB)
    assert device.device_memory("cuda:2") == (float("inf"), float("inf"))  # no such GPU: unknown
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"GPU-8e7f,{UUIDS[1]}")
    assert device.device_memory("cuda:1")[0] == TOTALS[1]


def test_cuda_visible_and_process_memory_pick_the_resolved_gpu(nvml, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    assert [job_process.cuda_visible(i) for i in (0, 1)] == ["2", "0"]
    assert job_process._nvml_process_memory({111}, "cuda:0") == 3 * GiB  # NVML GPU 2
    assert job_process._nvml_process_memory({111, 333}, "cuda:0") == 8 * GiB
    assert job_process._nvml_process_memory({111}, "cuda:1") == 1 * GiB  # NVML GPU 0
    assert job_process._nvml_process_memory({222}, "cuda:1") is None  # not on that GPU: unknown
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"GPU-8e7f,{UUIDS[0]}")
    assert [job_process.cuda_visible(i) for i in (0, 1)] == [UUIDS[2], UUIDS[0]]
    assert job_process._nvml_process_memory({111}, "cuda:1") == 1 * GiB
    assert job_process._nvml_process_memory({111}, "cuda:0") == 3 * GiB
    assert job_process._nvml_process_memory({111}, "cuda:2") is None  # no such GPU


def test_command_worker_samples_the_nvml_gpu_of_its_device(nvml, monkeypatch):
    from sharewise.profiler import blackbox
    from sharewise.profiler import nvml as nvml_module

    opened = []

    class Sampler:
        def __init__(self, index):
            opened.append(index)

        def start(self):
            raise DeviceError("NVML unavailable: this test stops here")

    monkeypatch.setattr(nvml_module, "NvmlSampler", Sampler)
    worker = blackbox.CommandWorker.__new__(blackbox.CommandWorker)  # only _sample_nvml's inputs are set
    worker.config = types.SimpleNamespace(device="cuda:1")
    worker.command = types.SimpleNamespace(name="job")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{UUIDS[1]},{UUIDS[2]}")
    assert worker._sample_nvml() == {} and opened == [2]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert worker._sample_nvml() == {} and opened == [2]  # cuda:1 is not visible: no sampler opened
