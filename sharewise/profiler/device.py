"""Device identity: names read from the hardware (never hard-coded), visible GPUs, synchronization."""

from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from sharewise.errors import DeviceError
from sharewise.profiler.config import device_kind

#: Environment variable that names the CPU model in place of ``/proc/cpuinfo``'s: a machine can report itself as
#: another one (tests run the guides as a user on another CPU model does), and two hosts whose models read
#: differently but behave alike can record one name. GPU names always come from NVML.
CPU_MODEL_ENV = "SHAREWISE_CPU_MODEL"


def cpu_model() -> str:
    """Return the CPU model string: ``$SHAREWISE_CPU_MODEL`` where set and not blank, else ``/proc/cpuinfo``'s
    ``model name`` (or ``platform.processor()``), e.g. ``"AMD EPYC"``.

    The variable is read on every call, so a worker process, started with the variable in its environment,
    records the same name as the command that started it.
    """
    override = os.environ.get(CPU_MODEL_ENV, "").strip()
    return override or _hardware_cpu_model()


@lru_cache(maxsize=1)
def _hardware_cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def cpu_device_name() -> str:
    """Return the CPU device name recorded in tables, e.g. ``"AMD EPYC (2 cores)"``: the cores we may use."""
    from sharewise.profiler.modes import available_cores

    return f"{cpu_model()} ({len(available_cores())} cores)"


def cuda_index(device: str) -> int:
    """Return the CUDA ordinal of ``device``: ``"cuda:1"`` gives 1, ``"cuda"`` gives 0."""
    return int(device.split(":", 1)[1]) if ":" in device else 0


@dataclass(frozen=True)
class VisibleGpu:
    """One GPU this process's ``CUDA_VISIBLE_DEVICES`` shows, as CUDA and as NVML number it.

    ``cuda_index`` is its ordinal in this process (``cuda:N``); ``nvml_index`` NVML's index of the same
    GPU (NVML ignores ``CUDA_VISIBLE_DEVICES``); ``entry`` the ``CUDA_VISIBLE_DEVICES`` value that shows a
    child process this GPU alone (the NVML index where the variable names indices or is unset, the full
    UUID where it names UUIDs). Example: ``VisibleGpu(cuda_index=0, nvml_index=2,
    uuid="GPU-5c1d6f0e-...", name="NVIDIA H200", entry="2")``.
    """

    cuda_index: int
    nvml_index: int
    uuid: str
    name: str
    entry: str


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _resolve_visible(pynvml: Any, visible: str | None) -> list[VisibleGpu]:
    """The GPUs ``visible`` (a ``CUDA_VISIBLE_DEVICES`` value, None if unset) shows, read from an initialized
    ``pynvml``; see ``visible_gpus`` for the rules."""
    count = pynvml.nvmlDeviceGetCount()
    devices = []
    for i in range(count):
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            devices.append((_text(pynvml.nvmlDeviceGetUUID(handle)), _text(pynvml.nvmlDeviceGetName(handle))))
        except pynvml.NVMLError as exc:
            raise DeviceError(
                f"NVML sees {count} GPU(s) but cannot read GPU {i} ({exc}); expected every GPU to answer: check "
                "`nvidia-smi`, or leave that GPU out of CUDA_VISIBLE_DEVICES"
            ) from None
    if visible is None:
        return [VisibleGpu(i, i, uuid, name, str(i)) for i, (uuid, name) in enumerate(devices)]
    # The rules are CUDA's as torch mirrors them (torch.cuda._parse_visible_devices, _transform_uuid_to_ordinals),
    # and as the CUDA driver (580) itself answered on an H200 for each case the docstring of visible_gpus names.
    tokens = [t.strip() for t in visible.split(",")]
    by_uuid = tokens[0].startswith("GPU-")  # the first entry sets the kind of the list
    gpus: list[VisibleGpu] = []
    for token in tokens:
        index = _match_token(token, by_uuid, [uuid for uuid, _ in devices])
        if index is None:
            break  # CUDA shows the devices before the first invalid entry
        if any(g.nvml_index == index for g in gpus):
            return []  # CUDA shows no device at all when one is listed twice
        uuid, name = devices[index]
        # A full UUID shows a child the same GPU whatever its CUDA_DEVICE_ORDER, and a prefix might not stay unique.
        gpus.append(VisibleGpu(len(gpus), index, uuid, name, uuid if by_uuid else str(index)))
    return gpus


def _match_token(token: str, by_uuid: bool, uuids: list[str]) -> int | None:
    """NVML's index of one ``CUDA_VISIBLE_DEVICES`` entry of a list of UUIDs (``by_uuid``) or of indices, or None
    where CUDA would stop reading the list."""
    if by_uuid:
        if not token.startswith("GPU-") or token == "GPU-":
            return None
        matches = [i for i, uuid in enumerate(uuids) if uuid.lower().startswith(token.lower())]
        return matches[0] if len(matches) == 1 else None
    # Read as strtoul reads it, as CUDA does: "1", "+1" and "1abc" are all device 1, "-1" and "GPU-..." end the list.
    # MIG-... entries end it too: a MIG slice has no NVML device index, and NVML reads its memory and utilization
    # only through a handle of its own, so sharewise does not run on MIG slices.
    digits = re.match(r"\+?\d+", token)
    if digits is None:
        return None
    index = int(digits.group())
    return index if index < len(uuids) else None


def visible_gpus(pynvml: Any = None) -> list[VisibleGpu]:
    """Return the GPUs this process's ``CUDA_VISIBLE_DEVICES`` shows, in CUDA's order, via NVML (no CUDA context).

    The variable is read as CUDA reads it: unset shows every GPU in NVML's order (which is CUDA's under
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, as sharewise sets for its workers); an empty value shows none; otherwise
    a comma list of NVML (PCI bus) indices, or of GPU UUIDs (``GPU-5c1d6f0e-...``, in any case, or a prefix
    that matches one GPU only), as the first entry sets. CUDA stops at the first invalid entry (an index out of
    range, a UUID that matches no GPU or several, an entry of the other kind), so the GPUs listed before it are
    visible and the rest are not; a GPU listed twice hides all of them. ``MIG-...`` entries are not resolved:
    a list of them shows no GPU here (sharewise does not run on MIG slices), where CUDA would show the slices.

    Parameters
    ----------
    pynvml : module, optional
        An initialized ``pynvml`` to read through (a caller already holding NVML avoids a second
        ``nvmlInit``); by default NVML is initialized and shut down here.

    Returns
    -------
    list of VisibleGpu
        Empty without NVML (no pynvml, no driver). Under ``CUDA_VISIBLE_DEVICES=2,0`` on a 3-GPU machine:
        ``[VisibleGpu(cuda_index=0, nvml_index=2, uuid="GPU-...", name="NVIDIA H200", entry="2"),
        VisibleGpu(cuda_index=1, nvml_index=0, uuid="GPU-...", name="NVIDIA H200", entry="0")]``.

    Raises
    ------
    DeviceError
        NVML initializes but cannot read one of its GPUs.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if pynvml is not None:
        return _resolve_visible(pynvml, visible)
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver
        return []
    try:
        return _resolve_visible(pynvml, visible)
    finally:
        pynvml.nvmlShutdown()


def nvml_index(device: str) -> int | None:
    """Return NVML's index of ``device`` (``"cuda"``, ``"cuda:N"``: a CUDA ordinal of this process), or None
    where NVML is unavailable or ``CUDA_VISIBLE_DEVICES`` shows no such GPU. Under
    ``CUDA_VISIBLE_DEVICES=2,0``, ``nvml_index("cuda:1")`` is 0."""
    gpus = visible_gpus()
    index = cuda_index(device)
    return gpus[index].nvml_index if index < len(gpus) else None


def gpu_names() -> list[str]:
    """Return the names of the visible NVIDIA GPUs in CUDA's order (``visible_gpus``), e.g. ``["NVIDIA H200"]``."""
    return [g.name for g in visible_gpus()]


def local_device_names() -> list[str]:
    """Return the names this machine's devices are recorded under: the CPU's, then each visible GPU's.

    Example: ``["AMD EPYC (2 cores)", "NVIDIA H200"]``; only the CPU's without NVML, or where NVML cannot read
    a GPU (a command that only prefers this machine's devices should not fail on that).
    """
    try:
        gpus = gpu_names()
    except DeviceError:
        gpus = []
    return [cpu_device_name(), *gpus]


def device_name(device: str) -> str:
    """Return the recorded name of ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:N"``), checking it exists."""
    if device_kind(device) == "cpu":
        return cpu_device_name()
    names = gpu_names()
    index = cuda_index(device)
    if index >= len(names):
        raise DeviceError(
            f"device {device!r} asked for, but {len(names)} NVIDIA GPU(s) are visible"
            + (f" ({', '.join(names)})" if names else " (no driver or no GPU)")
            + "; use --device cpu or a listed index"
        )
    return names[index]


def total_memory_bytes(device: str) -> float:
    """Return the device's memory: total RAM for the CPU, the GPU's memory for CUDA."""
    if device_kind(device) == "cpu":
        import psutil

        return float(psutil.virtual_memory().total)
    import torch

    return float(torch.cuda.get_device_properties(cuda_index(device)).total_memory)

#: Memory a new worker is assumed to need before one of its workload has reported its footprint:
#: on CPUs the resident set of a small torch process, on GPUs a CUDA context and a modest model.
FIRST_START_BYTES = {"cpu": 600 * 2**20, "cuda": 2 * 2**30}


def device_memory(device: str) -> tuple[float, float]:
    """Return ``(total, free)`` bytes of ``device``: RAM for the CPU, NVML's numbers for a GPU.

    ``cuda:N`` is this process's CUDA ordinal; NVML is asked about the GPU ``visible_gpus`` maps it to (under
    ``CUDA_VISIBLE_DEVICES=2,0``, ``cuda:1`` is NVML's GPU 0).

    The driver never creates a CUDA context of its own (it would hold memory and, under MPS, be a client);
    where NVML cannot tell, both are infinite and only the workers' own reports limit residency.
    """
    if device_kind(device) == "cpu":
        import psutil

        mem = psutil.virtual_memory()
        return float(mem.total), float(mem.available)
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            gpus = visible_gpus(pynvml)
            index = cuda_index(device)
            if index >= len(gpus):
                return float("inf"), float("inf")
            info = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(gpus[index].nvml_index))
            return float(info.total), float(info.free)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML, or CUDA_VISIBLE_DEVICES shows no such GPU: trust the workers' reports
        return float("inf"), float("inf")
