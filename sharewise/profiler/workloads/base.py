"""The ``Workload`` contract that every built-in and user workload follows."""

from __future__ import annotations

from typing import Any, ClassVar


class Workload:
    """One DL training (or inference) step loop on synthetic data.

    Contract (checked by the tests for every registered workload):

    - Class attributes ``name`` (registry key), ``family`` (model family, for grouped evaluation),
      ``default_batch_size`` and ``sizes`` (the size knob: ``"tiny"`` for tests, ``"small"`` for CPU
      campaigns, ``"full"`` for the published architecture).
    - ``__init__(batch_size=None, size="small")`` only stores parameters; nothing touches a device.
    - ``build(device)`` makes the model, the optimizer and one synthetic batch on ``device``; it downloads
      nothing and reads no file, so it runs from any working directory.
    - ``step()`` runs one iteration (forward, backward, optimizer step for training) and returns nothing;
      the caller synchronizes the device when it times steps.
    - ``close()`` drops every reference to device tensors so their memory can be freed; calling it twice
      is harmless.
    - ``inputs()`` returns the tensors a FLOP or op count needs to replay one step: by default the
      model is stepped as a whole, so most workloads need not override it.
    """

    name: ClassVar[str] = ""
    family: ClassVar[str] = ""
    default_batch_size: ClassVar[int] = 1
    kind: ClassVar[str] = "train"  # "train" or "infer"
    sizes: ClassVar[tuple[str, ...]] = ("tiny", "small", "full")
    description: ClassVar[str] = ""

    def __init__(self, batch_size: int | None = None, size: str = "small") -> None:
        if size not in self.sizes:
            raise ValueError(
                f"workload {self.name!r}: size must be one of {list(self.sizes)}, got {size!r}"
            )
        if batch_size is not None and (
            isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1
        ):
            raise ValueError(
                f"workload {self.name!r}: batch_size must be a positive integer, got {batch_size!r}"
            )
        self.batch_size = batch_size if batch_size is not None else self.default_batch_size
        self.size = size
        self.device: Any = None
        self.model: Any = None
        self.optimizer: Any = None

    def build(self, device: Any) -> None:  # pragma: no cover - contract
        raise NotImplementedError(f"{type(self).__name__} must implement build(device)")

    def step(self) -> None:  # pragma: no cover - contract
        raise NotImplementedError(f"{type(self).__name__} must implement step()")

    def close(self) -> None:
        """Release model, optimizer and batch; subclasses holding more tensors extend this."""
        for attr in list(vars(self)):
            if attr in ("batch_size", "size", "device", "name"):
                continue
            value = getattr(self, attr)
            if _holds_tensors(value):
                setattr(self, attr, None)
        self.model = None
        self.optimizer = None

    def describe(self) -> dict[str, Any]:
        """Return the static description used by ``sharewise workloads --json``.

        Example: ``{"name": "resnet18", "family": "resnet", "default_batch_size": 32, "kind": "train"}``
        """
        return {
            "name": self.name,
            "family": self.family,
            "default_batch_size": self.default_batch_size,
            "kind": self.kind,
            "sizes": list(self.sizes),
            "description": self.description,
        }


def _holds_tensors(value: Any) -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover
        return False
    if isinstance(value, (torch.Tensor, torch.nn.Module, torch.optim.Optimizer)):
        return True
    if isinstance(value, (list, tuple, dict)):
        items = value.values() if isinstance(value, dict) else value
        return any(isinstance(v, (torch.Tensor, torch.nn.Module)) for v in items)
    return False
