"""Recommendation workloads: NeuMF (embeddings plus an MLP tower) and a denoising autoencoder over items."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import torch
import torch.nn.functional as F
from torch import nn

from sharewise.profiler.workloads._common import TrainWorkload


@dataclass(frozen=True)
class NCFConfig:
    users: int
    items: int
    mf_dim: int
    mlp: tuple[int, ...]  # MLP tower widths; the first is the concatenated user+item embedding width
    batch_size: int | None = None


class NeuMF(nn.Module):
    """He et al. 2017: a GMF branch (elementwise product) and an MLP branch, fused by one output layer."""

    def __init__(self, cfg: NCFConfig) -> None:
        super().__init__()
        self.mf_user = nn.Embedding(cfg.users, cfg.mf_dim)
        self.mf_item = nn.Embedding(cfg.items, cfg.mf_dim)
        self.mlp_user = nn.Embedding(cfg.users, cfg.mlp[0] // 2)
        self.mlp_item = nn.Embedding(cfg.items, cfg.mlp[0] // 2)
        layers: list[nn.Module] = []
        for cin, cout in pairwise(cfg.mlp):
            layers += [nn.Linear(cin, cout), nn.ReLU()]
        self.mlp = nn.Sequential(*layers)
        self.out = nn.Linear(cfg.mf_dim + cfg.mlp[-1], 1)
        # MLPerf's reference initializes embeddings at std 0.01; N(0, 1) would saturate the sigmoid.
        for emb in (self.mf_user, self.mf_item, self.mlp_user, self.mlp_item):
            nn.init.normal_(emb.weight, 0.0, 0.01)

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        gmf = self.mf_user(users) * self.mf_item(items)
        mlp = self.mlp(torch.cat([self.mlp_user(users), self.mlp_item(items)], dim=-1))
        return self.out(torch.cat([gmf, mlp], dim=-1)).squeeze(-1)


class NCF(TrainWorkload):
    name = "ncf"
    family = "recommendation"
    default_batch_size = 2048
    description = "NeuMF recommendation (MovieLens-20M sized embeddings + MLP 256-256-128-64), BCE, Adam"
    configs = {
        "tiny": NCFConfig(users=200, items=100, mf_dim=8, mlp=(16, 16, 8), batch_size=16),
        # MovieLens-1M table sizes with the full tower.
        "small": NCFConfig(users=6040, items=3706, mf_dim=64, mlp=(256, 256, 128, 64)),
        "full": NCFConfig(users=138493, items=26744, mf_dim=64, mlp=(256, 256, 128, 64)),
    }

    def make_model(self) -> nn.Module:
        return NeuMF(self.cfg)

    def make_batch(self) -> dict[str, torch.Tensor]:
        b, d = self.batch_size, self.device
        return {
            "users": torch.randint(0, self.cfg.users, (b,), device=d),
            "items": torch.randint(0, self.cfg.items, (b,), device=d),
            # One positive per four sampled negatives, the NCF training ratio.
            "labels": (torch.rand(b, device=d) < 0.2).float(),
        }

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.Adam(model.parameters(), lr=5e-4)

    def loss(self) -> torch.Tensor:
        b = self.batch
        return F.binary_cross_entropy_with_logits(self.model(b["users"], b["items"]), b["labels"])


@dataclass(frozen=True)
class DAEConfig:
    items: int
    hidden: tuple[int, ...]  # encoder widths after the item layer; the decoder mirrors them
    density: float  # share of items a user has interacted with, for the synthetic multi-hot rows
    batch_size: int | None = None


class DenoisingAutoencoder(nn.Module):
    """Mult-DAE (Liang et al. 2018): dropout on the input row, tanh encoder, decoder back to every item."""

    def __init__(self, cfg: DAEConfig) -> None:
        super().__init__()
        widths = (cfg.items, *cfg.hidden)
        self.drop = nn.Dropout(0.5)
        self.encoder = nn.ModuleList(nn.Linear(a, b) for a, b in pairwise(widths))
        self.decoder = nn.ModuleList(nn.Linear(b, a) for a, b in reversed(list(pairwise(widths))))

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        x = self.drop(F.normalize(rows, dim=-1))
        for layer in self.encoder:
            x = torch.tanh(layer(x))
        for i, layer in enumerate(self.decoder):
            x = layer(x)
            if i < len(self.decoder) - 1:
                x = torch.tanh(x)
        return x


class DAECF(TrainWorkload):
    name = "dae_cf"
    family = "recommendation"
    default_batch_size = 512
    description = "Denoising autoencoder over MovieLens-20M's 20,108 items (one 200-unit tanh layer), Adam"
    # The ML-20M autoencoder of Gavel's Recommendation jobs (data prepared as in Liang et al.'s
    # ``pro_sg``): each sample is one user's dense multi-hot row over every item, so a step is two large
    # GEMMs whatever the batch, unlike NeuMF's embedding lookups.
    configs = {
        "tiny": DAEConfig(items=64, hidden=(8,), density=0.1, batch_size=4),
        "small": DAEConfig(items=3706, hidden=(200,), density=0.03),  # MovieLens-1M items
        "full": DAEConfig(items=20108, hidden=(200,), density=0.005),
    }

    def make_model(self) -> nn.Module:
        return DenoisingAutoencoder(self.cfg)

    def make_batch(self) -> dict[str, torch.Tensor]:
        b, n, d = self.batch_size, self.cfg.items, self.device
        return {"rows": (torch.rand(b, n, device=d) < self.cfg.density).float()}

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=2e-5)

    def loss(self) -> torch.Tensor:
        rows = self.batch["rows"]
        # Multinomial log-likelihood of the held items, the Mult-DAE objective.
        return -(F.log_softmax(self.model(rows), dim=-1) * rows).sum(-1).mean()
