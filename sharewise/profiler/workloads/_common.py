"""Shared plumbing of the built-in workloads: per-size configurations and the train/infer step loops."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from sharewise.profiler.workloads.base import Workload


class ZooWorkload(Workload):
    """A built-in workload whose ``size`` picks one frozen config dataclass out of ``configs``.

    A config may carry ``batch_size``: the tiny size runs a handful of samples so tests stay fast. The
    batch is settled here rather than in ``build`` so that ``self.batch_size`` is the batch that will
    actually run before anything is built (profiles record it). An explicit ``batch_size`` always wins.
    """

    configs: ClassVar[Mapping[str, Any]] = {}

    def __init__(self, batch_size: int | None = None, size: str = "small") -> None:
        super().__init__(batch_size, size)
        self.cfg = self.configs[size]
        if batch_size is None and getattr(self.cfg, "batch_size", None):
            self.batch_size = self.cfg.batch_size
        self.last_output: Any = None

    def _enter(self, device: Any) -> torch.device:
        # Building under the device context makes parameters directly on the device: no CPU init of
        # hundreds of MB for "full" models and no compute at all on "meta".
        self.device = torch.device(device)
        return self.device


class TrainWorkload(ZooWorkload):
    """One model, one optimizer, one loss: subclasses give the four ``make_*``/``loss`` hooks."""

    kind = "train"

    def make_model(self) -> torch.nn.Module:  # pragma: no cover - contract
        raise NotImplementedError(f"{type(self).__name__} must implement make_model()")

    def make_batch(self) -> dict[str, torch.Tensor]:  # pragma: no cover - contract
        raise NotImplementedError(f"{type(self).__name__} must implement make_batch()")

    def make_optimizer(self, model: torch.nn.Module) -> torch.optim.Optimizer:  # pragma: no cover
        raise NotImplementedError(f"{type(self).__name__} must implement make_optimizer(model)")

    def loss(self) -> torch.Tensor:  # pragma: no cover - contract
        raise NotImplementedError(f"{type(self).__name__} must implement loss()")

    def build(self, device: Any) -> None:
        with self._enter(device):
            self.model = self.make_model()
            self.batch = self.make_batch()
            self.optimizer = self.make_optimizer(self.model)
        self.model.train()

    def step(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss()
        loss.backward()
        self.clip_gradients()
        self.optimizer.step()
        self.last_output = loss.detach()

    def clip_gradients(self) -> None:
        """Clip before the update where the reference recipe does; the default recipe does not."""


class InferWorkload(ZooWorkload):
    """Forward passes only, under ``torch.inference_mode``: no optimizer, no autograd state."""

    kind = "infer"

    def make_model(self) -> torch.nn.Module:  # pragma: no cover - contract
        raise NotImplementedError(f"{type(self).__name__} must implement make_model()")

    def make_batch(self) -> dict[str, torch.Tensor]:  # pragma: no cover - contract
        raise NotImplementedError(f"{type(self).__name__} must implement make_batch()")

    def forward(self) -> torch.Tensor:  # pragma: no cover - contract
        raise NotImplementedError(f"{type(self).__name__} must implement forward()")

    def build(self, device: Any) -> None:
        with self._enter(device):
            self.model = self.make_model()
            self.batch = self.make_batch()
        self.model.eval().requires_grad_(False)

    def step(self) -> None:
        with torch.inference_mode():
            self.last_output = self.forward()

