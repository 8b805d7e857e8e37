"""GAN workloads: DCGAN and CycleGAN, each step a discriminator update and a generator update."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from sharewise.profiler.workloads._common import ZooWorkload


@dataclass(frozen=True)
class GANConfig:
    image: int
    gen_width: int  # ngf: generator channels at full resolution
    disc_width: int  # ndf: discriminator channels at the first layer
    latent: int = 100
    res_blocks: int = 0  # CycleGAN generator's residual blocks
    batch_size: int | None = None


def _adam(params: Any) -> torch.optim.Optimizer:
    # Both papers' recipe: lr 2e-4 and beta1 0.5 so the adversarial game does not oscillate.
    return torch.optim.Adam(params, lr=2e-4, betas=(0.5, 0.999))


class _GANWorkload(ZooWorkload):
    """A GAN: two optimizers, ``opt_g`` and ``opt_d``, and no single ``optimizer``.

    ``model`` is a ModuleDict of every network so parameter and FLOP counts see all of them.
    """

    kind = "train"


# --- DCGAN (Radford et al. 2016) -----------------------------------------------------------------


def _dcgan_init(module: nn.Module) -> None:
    # The paper's N(0, 0.02) initialization, so early-training activations match the published model.
    for m in module.modules():
        if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.normal_(m.weight, 1.0, 0.02)
            nn.init.zeros_(m.bias)


class DCGANGenerator(nn.Module):
    def __init__(self, cfg: GANConfig) -> None:
        super().__init__()
        ups = int(math.log2(cfg.image)) - 2  # 4x4 seed doubled up to the image size
        ch = cfg.gen_width * 2 ** (ups - 1)
        layers: list[nn.Module] = [
            nn.ConvTranspose2d(cfg.latent, ch, 4, 1, 0, bias=False),
            nn.BatchNorm2d(ch),
            nn.ReLU(True),
        ]
        for _ in range(ups - 1):
            layers += [
                nn.ConvTranspose2d(ch, ch // 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ch // 2), nn.ReLU(True)
            ]
            ch //= 2
        layers += [nn.ConvTranspose2d(ch, 3, 4, 2, 1, bias=False), nn.Tanh()]
        self.net = nn.Sequential(*layers)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z)


class DCGANDiscriminator(nn.Module):
    def __init__(self, cfg: GANConfig) -> None:
        super().__init__()
        downs = int(math.log2(cfg.image)) - 2
        ch = cfg.disc_width
        layers: list[nn.Module] = [nn.Conv2d(3, ch, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, True)]
        for _ in range(downs - 1):
            layers += [
                nn.Conv2d(ch, ch * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ch * 2), nn.LeakyReLU(0.2, True)
            ]
            ch *= 2
        layers.append(nn.Conv2d(ch, 1, 4, 1, 0, bias=False))  # logits; the sigmoid lives in the loss
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).flatten()


class DCGAN(_GANWorkload):
    name = "dcgan"
    family = "gan"
    default_batch_size = 128
    description = "DCGAN 64x64 image generation (transposed-conv G, conv D), one D and one G update, Adam"
    configs = {
        "tiny": GANConfig(image=16, gen_width=4, disc_width=4, latent=16, batch_size=2),
        "small": GANConfig(image=32, gen_width=16, disc_width=16, latent=64),
        "full": GANConfig(image=64, gen_width=64, disc_width=64, latent=100),
    }

    def build(self, device: Any) -> None:
        with self._enter(device):
            self.model = nn.ModuleDict({"G": DCGANGenerator(self.cfg), "D": DCGANDiscriminator(self.cfg)})
            _dcgan_init(self.model)
            b = self.batch_size
            self.real = torch.randn(b, 3, self.cfg.image, self.cfg.image, device=self.device).tanh()
            self.noise = torch.randn(b, self.cfg.latent, 1, 1, device=self.device)
            self.ones = torch.ones(b, device=self.device)
            self.zeros = torch.zeros(b, device=self.device)
        self.opt_g = _adam(self.model["G"].parameters())
        self.opt_d = _adam(self.model["D"].parameters())
        self.model.train()

    def step(self) -> None:
        G, D = self.model["G"], self.model["D"]
        # Discriminator: real up, fake down; the fake is detached so G gets no gradient here.
        self.opt_d.zero_grad(set_to_none=True)
        fake = G(self.noise)
        loss_d = F.binary_cross_entropy_with_logits(D(self.real), self.ones)
        loss_d = loss_d + F.binary_cross_entropy_with_logits(D(fake.detach()), self.zeros)
        loss_d.backward()
        self.opt_d.step()
        # Generator: the same fake, now scored against the "real" label (non-saturating loss).
        self.opt_g.zero_grad(set_to_none=True)
        loss_g = F.binary_cross_entropy_with_logits(D(fake), self.ones)
        loss_g.backward()
        self.opt_g.step()
        self.last_output = torch.stack([loss_d.detach(), loss_g.detach()])


# --- CycleGAN (Zhu et al. 2017) ------------------------------------------------------------------

CYCLE_WEIGHT = 10.0  # lambda for the cycle-consistency L1 terms
IDENTITY_WEIGHT = 0.5  # identity loss, relative to CYCLE_WEIGHT


class ResnetBlock(nn.Module):
    def __init__(self, ch: int) -> None:
        super().__init__()
        self.block = nn.Sequential(
            nn.ReflectionPad2d(1), nn.Conv2d(ch, ch, 3), nn.InstanceNorm2d(ch), nn.ReLU(True),
            nn.ReflectionPad2d(1), nn.Conv2d(ch, ch, 3), nn.InstanceNorm2d(ch),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x)


class ResnetGenerator(nn.Module):
    """c7s1-64, d128, d256, R256 x n, u128, u64, c7s1-3 (the paper's 9-block generator at n=9)."""

    def __init__(self, cfg: GANConfig) -> None:
        super().__init__()
        w = cfg.gen_width
        layers: list[nn.Module] = [
            nn.ReflectionPad2d(3), nn.Conv2d(3, w, 7), nn.InstanceNorm2d(w), nn.ReLU(True)
        ]
        for mult in (1, 2):
            layers += [
                nn.Conv2d(w * mult, w * mult * 2, 3, 2, 1), nn.InstanceNorm2d(w * mult * 2), nn.ReLU(True)
            ]
        layers += [ResnetBlock(w * 4) for _ in range(cfg.res_blocks)]
        for mult in (4, 2):
            layers += [
                nn.ConvTranspose2d(w * mult, w * mult // 2, 3, 2, 1, output_padding=1),
                nn.InstanceNorm2d(w * mult // 2),
                nn.ReLU(True),
            ]
        layers += [nn.ReflectionPad2d(3), nn.Conv2d(w, 3, 7), nn.Tanh()]
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class PatchDiscriminator(nn.Module):
    """The 70x70 PatchGAN: one real/fake logit per overlapping image patch."""

    def __init__(self, cfg: GANConfig) -> None:
        super().__init__()
        w = cfg.disc_width
        layers: list[nn.Module] = [nn.Conv2d(3, w, 4, 2, 1), nn.LeakyReLU(0.2, True)]
        for cin, cout, stride in ((w, 2 * w, 2), (2 * w, 4 * w, 2), (4 * w, 8 * w, 1)):
            layers += [nn.Conv2d(cin, cout, 4, stride, 1), nn.InstanceNorm2d(cout), nn.LeakyReLU(0.2, True)]
        layers.append(nn.Conv2d(8 * w, 1, 4, 1, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class CycleGAN(_GANWorkload):
    name = "cyclegan"
    family = "gan"
    default_batch_size = 1
    description = "CycleGAN 256x256 unpaired translation (2 ResNet-9 generators, 2 PatchGAN D), LSGAN, Adam"
    configs = {
        "tiny": GANConfig(image=24, gen_width=4, disc_width=4, res_blocks=1),
        "small": GANConfig(image=64, gen_width=16, disc_width=16, res_blocks=3),
        "full": GANConfig(image=256, gen_width=64, disc_width=64, res_blocks=9),
    }

    def build(self, device: Any) -> None:
        with self._enter(device):
            self.model = nn.ModuleDict({
                "G_A": ResnetGenerator(self.cfg), "G_B": ResnetGenerator(self.cfg),
                "D_A": PatchDiscriminator(self.cfg), "D_B": PatchDiscriminator(self.cfg),
            })
            for m in self.model.modules():
                if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
                    nn.init.normal_(m.weight, 0.0, 0.02)
            shape = (self.batch_size, 3, self.cfg.image, self.cfg.image)
            self.real_a = torch.randn(shape, device=self.device).tanh()
            self.real_b = torch.randn(shape, device=self.device).tanh()
        m = self.model
        self.opt_g = _adam(itertools.chain(m["G_A"].parameters(), m["G_B"].parameters()))
        self.opt_d = _adam(itertools.chain(m["D_A"].parameters(), m["D_B"].parameters()))
        self.model.train()

    def _set_disc_grad(self, flag: bool) -> None:
        # The reference freezes D during the G update so backward does not compute D's weight gradients.
        self.model["D_A"].requires_grad_(flag)
        self.model["D_B"].requires_grad_(flag)

    def step(self) -> None:
        m, real_a, real_b = self.model, self.real_a, self.real_b
        G_A, G_B, D_A, D_B = m["G_A"], m["G_B"], m["D_A"], m["D_B"]
        fake_b, fake_a = G_A(real_a), G_B(real_b)
        # Generators first, as in the reference: adversarial (least squares), cycle and identity terms.
        self._set_disc_grad(False)
        self.opt_g.zero_grad(set_to_none=True)
        pred_b, pred_a = D_A(fake_b), D_B(fake_a)
        loss_g = F.mse_loss(pred_b, torch.ones_like(pred_b)) + F.mse_loss(pred_a, torch.ones_like(pred_a))
        loss_g = loss_g + CYCLE_WEIGHT * (F.l1_loss(G_B(fake_b), real_a) + F.l1_loss(G_A(fake_a), real_b))
        identity = F.l1_loss(G_A(real_b), real_b) + F.l1_loss(G_B(real_a), real_a)
        loss_g = loss_g + CYCLE_WEIGHT * IDENTITY_WEIGHT * identity
        loss_g.backward()
        self.opt_g.step()
        # Discriminators on real vs the (detached) fakes of this step; the paper's image pool is
        # omitted because its random replay would change the work from step to step.
        self._set_disc_grad(True)
        self.opt_d.zero_grad(set_to_none=True)
        loss_d = real_a.new_zeros(())
        for D, real, fake in ((D_A, real_b, fake_b), (D_B, real_a, fake_a)):
            p_real, p_fake = D(real), D(fake.detach())
            loss_d = loss_d + 0.5 * (
                F.mse_loss(p_real, torch.ones_like(p_real)) + F.mse_loss(p_fake, torch.zeros_like(p_fake))
            )
        loss_d.backward()
        self.opt_d.step()
        self.last_output = torch.stack([loss_d.detach(), loss_g.detach()])
