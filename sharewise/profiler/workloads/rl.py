"""Reinforcement-learning workloads: A3C (feed-forward, LSTM) on Atari frames and PPO, synthetic rollouts."""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import pairwise

import torch
import torch.nn.functional as F
from torch import nn

from sharewise.profiler.workloads._common import TrainWorkload

GAMMA = 0.99  # discount factor of both recipes
ENTROPY_WEIGHT = 0.01
VALUE_WEIGHT = 0.5


# --- A3C (Mnih et al. 2016) ----------------------------------------------------------------------


def _episode_returns(n: int, device: torch.device) -> torch.Tensor:
    """Discounted returns of an ``n``-step rollout of random rewards in -1, 0, 1 that ends its episode.

    The episode's end means the n-step returns need no bootstrap value. A bootstrapped target chases the
    network's own output on a batch that never changes and drifts without bound over a long campaign; a fixed
    target keeps every step's numbers finite.
    """
    rewards = torch.randint(-1, 2, (n,), device=device).float()
    steps = torch.arange(n, device=device, dtype=torch.float32)
    lag = steps.unsqueeze(0) - steps.unsqueeze(1)
    discount = torch.where(lag >= 0, GAMMA ** lag.clamp(min=0), torch.zeros_like(lag))
    return discount @ rewards


def _actor_critic_loss(advantage: torch.Tensor, logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """A3C's loss of one rollout from its advantages (returns - values): policy gradient, value regression,
    entropy bonus."""
    logp = F.log_softmax(logits, dim=-1)
    entropy = -(logp.exp() * logp).sum(-1)
    chosen = logp.gather(1, actions.unsqueeze(1)).squeeze(1)
    policy_loss = -(chosen * advantage.detach()).mean()
    return policy_loss + VALUE_WEIGHT * advantage.pow(2).mean() - ENTROPY_WEIGHT * entropy.mean()


@dataclass(frozen=True)
class A3CConfig:
    frame: int  # square frame side in pixels (84 on Atari after preprocessing)
    stack: int  # stacked frames per observation
    width: float  # scales conv channels and the hidden layer; 1.0 = the Nature DQN torso
    actions: int
    batch_size: int | None = None


def _conv_out(n: int, kernel: int, stride: int) -> int:
    return (n - kernel) // stride + 1


class ActorCritic(nn.Module):
    """The Nature DQN conv torso (32-64-64 channels, 512 hidden) with policy and value heads."""

    def __init__(self, cfg: A3CConfig) -> None:
        super().__init__()
        c1, c2, hidden = (max(4, round(c * cfg.width)) for c in (32, 64, 512))
        self.torso = nn.Sequential(
            nn.Conv2d(cfg.stack, c1, 8, 4), nn.ReLU(),
            nn.Conv2d(c1, c2, 4, 2), nn.ReLU(),
            nn.Conv2d(c2, c2, 3, 1), nn.ReLU(),
            nn.Flatten(),
        )
        side = _conv_out(_conv_out(_conv_out(cfg.frame, 8, 4), 4, 2), 3, 1)
        self.fc = nn.Sequential(nn.Linear(c2 * side * side, hidden), nn.ReLU())
        self.policy = nn.Linear(hidden, cfg.actions)
        self.value = nn.Linear(hidden, 1)

    def forward(self, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.fc(self.torso(frames))
        return self.policy(h), self.value(h).squeeze(-1)


class A3C(TrainWorkload):
    name = "a3c"
    family = "rl"
    default_batch_size = 20
    description = "A3C actor-critic update on a 20-step rollout of 4x84x84 Atari frames, RMSprop"
    configs = {
        "tiny": A3CConfig(frame=36, stack=4, width=0.125, actions=6, batch_size=4),
        "small": A3CConfig(frame=84, stack=4, width=1.0, actions=6),
        "full": A3CConfig(frame=84, stack=4, width=1.0, actions=6),
    }

    def make_model(self) -> nn.Module:
        return ActorCritic(self.cfg)

    def make_batch(self) -> dict[str, torch.Tensor]:
        n, d, side = self.batch_size, self.device, self.cfg.frame
        returns = _episode_returns(n, d)
        return {
            # uint8 like an emulator's frames; the scaling is part of every real step.
            "frames": torch.randint(0, 256, (n, self.cfg.stack, side, side), dtype=torch.uint8, device=d),
            "actions": torch.randint(0, self.cfg.actions, (n,), device=d),
            "returns": returns,
        }

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.RMSprop(model.parameters(), lr=7e-4, alpha=0.99, eps=0.1)

    def loss(self) -> torch.Tensor:
        b = self.batch
        logits, values = self.model(b["frames"].float() / 255.0)
        return _actor_critic_loss(b["returns"] - values, logits, b["actions"])

    def clip_gradients(self) -> None:
        nn.utils.clip_grad_norm_(self.model.parameters(), 40.0)


# --- A3C with an LSTM policy (rl_a3c_pytorch's A3Clstm, as in Gavel's A3C jobs) -----------------


@dataclass(frozen=True)
class A3CLSTMConfig:
    frame: int  # square grey frame side in pixels (80 after the recipe's crop and resize)
    width: float  # scales conv channels and the LSTM; 1.0 = the published 32-32-64-64 convs, 512 cells
    actions: int
    batch_size: int | None = None


class RecurrentActorCritic(nn.Module):
    """Four conv + max-pool layers on one grey frame, an LSTM cell, policy and value heads."""

    def __init__(self, cfg: A3CLSTMConfig) -> None:
        super().__init__()
        c1, c2, c3, hidden = (max(4, round(c * cfg.width)) for c in (32, 64, 64, 512))
        self.torso = nn.Sequential(
            nn.Conv2d(1, c1, 5, 1, 2), nn.MaxPool2d(2, 2), nn.LeakyReLU(0.1),
            nn.Conv2d(c1, c1, 5, 1, 1), nn.MaxPool2d(2, 2), nn.LeakyReLU(0.1),
            nn.Conv2d(c1, c2, 4, 1, 1), nn.MaxPool2d(2, 2), nn.LeakyReLU(0.1),
            nn.Conv2d(c2, c3, 3, 1, 1), nn.MaxPool2d(2, 2), nn.LeakyReLU(0.1),
            nn.Flatten(),
        )
        side = (((cfg.frame // 2 - 2) // 2 - 1) // 2) // 2
        self.lstm = nn.LSTMCell(c3 * side * side, hidden)
        self.policy = nn.Linear(hidden, cfg.actions)
        self.value = nn.Linear(hidden, 1)
        self.hidden = hidden

    def forward(
        self, frame: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        h, c = self.lstm(self.torso(frame), state)
        return self.policy(h), self.value(h).squeeze(-1), (h, c)


class A3CLSTM(TrainWorkload):
    name = "a3c_lstm"
    family = "rl"
    default_batch_size = 20
    description = "A3C, LSTM policy on 1x80x80 Pong frames acted one by one, 20-step rollout, Adam (amsgrad)"
    # The recipe of dgriff777/rl_a3c_pytorch, which Gavel's A3C jobs run: the rollout is acted one
    # frame at a time (the recurrent state forbids batching frames), so a step is many small kernels.
    configs = {
        "tiny": A3CLSTMConfig(frame=40, width=0.125, actions=6, batch_size=4),
        "small": A3CLSTMConfig(frame=80, width=0.5, actions=6),
        "full": A3CLSTMConfig(frame=80, width=1.0, actions=6),
    }

    def make_model(self) -> nn.Module:
        return RecurrentActorCritic(self.cfg)

    def make_batch(self) -> dict[str, torch.Tensor]:
        n, d, side = self.batch_size, self.device, self.cfg.frame
        returns = _episode_returns(n, d)
        return {
            "frames": torch.rand(n, 1, 1, side, side, device=d),
            "actions": torch.randint(0, self.cfg.actions, (n,), device=d),
            "returns": returns,
        }

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.Adam(model.parameters(), lr=1e-4, amsgrad=True)

    def loss(self) -> torch.Tensor:
        b = self.batch
        hidden = self.model.hidden
        state = (
            torch.zeros(1, hidden, device=self.device),
            torch.zeros(1, hidden, device=self.device),
        )
        logits, values = [], []
        for frame in b["frames"]:
            logit, value, state = self.model(frame, state)
            logits.append(logit)
            values.append(value)
        return _actor_critic_loss(b["returns"] - torch.cat(values), torch.cat(logits), b["actions"])

    def clip_gradients(self) -> None:
        nn.utils.clip_grad_norm_(self.model.parameters(), 40.0)


# --- PPO (Schulman et al. 2017) ------------------------------------------------------------------

CLIP_RANGE = 0.2


@dataclass(frozen=True)
class PPOConfig:
    observations: int
    actions: int
    hidden: tuple[int, ...]
    minibatch: int
    batch_size: int | None = None


def _mlp(widths: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for cin, cout in pairwise(widths):
        layers += [nn.Linear(cin, cout), nn.Tanh()]
    return nn.Sequential(*layers[:-1])  # no activation after the output layer


class GaussianActorCritic(nn.Module):
    """Separate tanh MLPs for the action mean and the value; a state-independent log std per action."""

    def __init__(self, cfg: PPOConfig) -> None:
        super().__init__()
        self.actor = _mlp([cfg.observations, *cfg.hidden, cfg.actions])
        self.critic = _mlp([cfg.observations, *cfg.hidden, 1])
        self.log_std = nn.Parameter(torch.zeros(cfg.actions))

    def forward(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Return the log-probability of ``actions``, the policy entropy and the state values."""
        mean = self.actor(obs)
        z = (actions - mean) * torch.exp(-self.log_std)
        logp = (-0.5 * z.pow(2) - self.log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        entropy = (self.log_std + 0.5 * math.log(2 * math.pi * math.e)).sum()
        return logp, entropy, self.critic(obs).squeeze(-1)


class PPO(TrainWorkload):
    name = "ppo"
    family = "rl"
    default_batch_size = 2048
    description = (
        "PPO clipped-objective update epoch: a 2048-sample MuJoCo-like rollout in minibatches of 64, "
        "tanh MLP 64-64 policy and value, Adam"
    )
    configs = {
        "tiny": PPOConfig(observations=8, actions=2, hidden=(16, 16), minibatch=32, batch_size=64),
        "small": PPOConfig(observations=17, actions=6, hidden=(64, 64), minibatch=64),
        "full": PPOConfig(observations=376, actions=17, hidden=(64, 64), minibatch=64),
    }

    def make_model(self) -> nn.Module:
        return GaussianActorCritic(self.cfg)

    def make_batch(self) -> dict[str, torch.Tensor]:
        n, d = self.batch_size, self.device
        obs = torch.randn(n, self.cfg.observations, device=d)
        actions = torch.randn(n, self.cfg.actions, device=d)
        with torch.no_grad():
            # Log-probs under the initial policy, so ratios start at 1 and clipping engages as it learns.
            old_logp, _, _ = self.model(obs, actions)
        advantages = torch.randn(n, device=d)
        return {
            "obs": obs,
            "actions": actions,
            "old_logp": old_logp,
            "advantages": (advantages - advantages.mean()) / (advantages.std() + 1e-8),
            "returns": torch.randn(n, device=d),
        }

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.Adam(model.parameters(), lr=3e-4, eps=1e-5)

    def step(self) -> None:
        # One step is one pass over the rollout: a single 64-sample update is well under a millisecond
        # and would measure Python overhead, not the job. Minibatches are fixed contiguous slices so
        # the work is identical from step to step.
        for start in range(0, self.batch_size, self.cfg.minibatch):
            self.optimizer.zero_grad(set_to_none=True)
            loss = self._minibatch_loss(slice(start, start + self.cfg.minibatch))
            loss.backward()
            nn.utils.clip_grad_norm_(self.model.parameters(), 0.5)
            self.optimizer.step()
        self.last_output = loss.detach()

    def _minibatch_loss(self, rows: slice) -> torch.Tensor:
        b = {k: v[rows] for k, v in self.batch.items()}
        logp, entropy, values = self.model(b["obs"], b["actions"])
        ratio = torch.exp(logp - b["old_logp"])
        surrogate = torch.min(
            ratio * b["advantages"], ratio.clamp(1 - CLIP_RANGE, 1 + CLIP_RANGE) * b["advantages"]
        )
        value_loss = F.mse_loss(values, b["returns"])
        return -surrogate.mean() + VALUE_WEIGHT * value_loss - ENTROPY_WEIGHT * entropy
