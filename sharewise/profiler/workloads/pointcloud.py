"""Point-cloud workload: PointNet classification with input and feature transform networks."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import torch
import torch.nn.functional as F
from torch import nn

from sharewise.profiler.workloads._common import TrainWorkload

FEATURE_TRANSFORM_WEIGHT = 0.001  # weight of the orthogonality regularizer in the PointNet paper


@dataclass(frozen=True)
class PointNetConfig:
    points: int
    width: float  # scales every channel count; 1.0 is the published 64-128-1024 / 512-256 net
    classes: int
    batch_size: int | None = None


def _pointwise(widths: list[int]) -> nn.Sequential:
    # A shared MLP over points is a kernel-size-1 Conv1d, as in the reference implementations.
    layers: list[nn.Module] = []
    for cin, cout in pairwise(widths):
        layers += [nn.Conv1d(cin, cout, 1), nn.BatchNorm1d(cout), nn.ReLU()]
    return nn.Sequential(*layers)


def _head(widths: list[int], dropout: float = 0.0) -> nn.Sequential:
    layers: list[nn.Module] = []
    for cin, cout in pairwise(widths[:-1]):
        layers += [nn.Linear(cin, cout), nn.BatchNorm1d(cout), nn.ReLU()]
    if dropout:
        layers.append(nn.Dropout(dropout))
    layers.append(nn.Linear(widths[-2], widths[-1]))
    return nn.Sequential(*layers)


class TNet(nn.Module):
    """Predicts a k x k alignment matrix for the points (k=3) or their features (k=64)."""

    def __init__(self, k: int, w: int) -> None:
        super().__init__()
        self.k = k
        self.features = _pointwise([k, w, 2 * w, 16 * w])
        self.head = _head([16 * w, 8 * w, 4 * w, k * k])
        nn.init.zeros_(self.head[-1].weight)  # start at the identity transform
        nn.init.zeros_(self.head[-1].bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.features(x).amax(dim=2)
        eye = torch.eye(self.k, device=x.device, dtype=x.dtype)
        return self.head(h).view(-1, self.k, self.k) + eye


class PointNetClassifier(nn.Module):
    def __init__(self, cfg: PointNetConfig) -> None:
        super().__init__()
        w = max(4, round(64 * cfg.width))
        self.input_transform = TNet(3, w)
        self.mlp1 = _pointwise([3, w, w])
        self.feature_transform = TNet(w, w)
        self.mlp2 = _pointwise([w, 2 * w, 16 * w])
        self.head = _head([16 * w, 8 * w, 4 * w, cfg.classes], dropout=0.3)

    def forward(self, points: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.bmm(self.input_transform(points).transpose(1, 2), points)
        x = self.mlp1(x)
        t = self.feature_transform(x)
        x = torch.bmm(t.transpose(1, 2), x)
        x = self.mlp2(x).amax(dim=2)
        return self.head(x), t


class PointNet(TrainWorkload):
    name = "pointnet"
    family = "pointnet"
    default_batch_size = 32
    description = "PointNet classification with T-Nets (ModelNet40-like, 1024 points per cloud), Adam"
    configs = {
        "tiny": PointNetConfig(points=64, width=0.125, classes=10, batch_size=4),
        "small": PointNetConfig(points=256, width=0.1875, classes=40),
        "full": PointNetConfig(points=1024, width=1.0, classes=40),
    }

    def make_model(self) -> nn.Module:
        return PointNetClassifier(self.cfg)

    def make_batch(self) -> dict[str, torch.Tensor]:
        b, d = self.batch_size, self.device
        return {
            "points": torch.randn(b, 3, self.cfg.points, device=d),
            "labels": torch.randint(0, self.cfg.classes, (b,), device=d),
        }

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.Adam(model.parameters(), lr=1e-3)

    def loss(self) -> torch.Tensor:
        logits, t = self.model(self.batch["points"])
        eye = torch.eye(t.shape[1], device=t.device, dtype=t.dtype)
        regularizer = torch.linalg.matrix_norm(torch.bmm(t, t.transpose(1, 2)) - eye).mean()
        return F.cross_entropy(logits, self.batch["labels"]) + FEATURE_TRANSFORM_WEIGHT * regularizer
