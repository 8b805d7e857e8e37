"""Image-classification workloads: ResNet-18/50, VGG-16 and MobileNetV2, written in plain torch."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from sharewise.profiler.workloads._common import InferWorkload, TrainWorkload


@dataclass(frozen=True)
class VisionConfig:
    """``width`` scales channel counts (1.0 = published), ``depth`` lists blocks per stage.

    ``stem`` is ``"imagenet"`` (7x7 stride-2 conv and max pool: a 224 px image enters the first stage at
    56 px) or ``"cifar"`` (one 3x3 stride-1 conv: a 32 px image enters the first stage at full size).
    """

    image: int
    width: float
    depth: tuple[int, ...]
    classes: int
    batch_size: int | None = None
    stem: str = "imagenet"


def _channels(c: int, width: float, divisor: int = 8) -> int:
    # Round like MobileNet's _make_divisible so narrowed nets keep SIMD-friendly channel counts.
    if width == 1.0:
        return c
    return max(divisor // 2, int(c * width + divisor / 2) // divisor * divisor)


def _image_batch(cfg: VisionConfig, batch: int, device: torch.device) -> dict[str, torch.Tensor]:
    return {
        "images": torch.randn(batch, 3, cfg.image, cfg.image, device=device),
        "labels": torch.randint(0, cfg.classes, (batch,), device=device),
    }


# --- ResNet (He et al. 2016) ---------------------------------------------------------------------


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = _shortcut(cin, planes * self.expansion, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int) -> None:
        super().__init__()
        out = planes * self.expansion
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        # Stride on the 3x3 conv (torchvision's "ResNet v1.5"), the variant every benchmark trains.
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.shortcut = _shortcut(cin, out, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + self.shortcut(x))


def _shortcut(cin: int, cout: int, stride: int) -> nn.Module:
    if stride == 1 and cin == cout:
        return nn.Identity()
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))


class ResNet(nn.Module):
    def __init__(self, block: type[BasicBlock | Bottleneck], cfg: VisionConfig) -> None:
        super().__init__()
        stem = _channels(64, cfg.width)
        if cfg.stem == "cifar":
            # The CIFAR variant of the ImageNet ResNets (e.g. kuangliu/pytorch-cifar): small images keep
            # their resolution into the first stage instead of being cut to a quarter by the stem.
            self.stem = nn.Sequential(
                nn.Conv2d(3, stem, 3, 1, 1, bias=False), nn.BatchNorm2d(stem), nn.ReLU(inplace=True)
            )
        else:
            self.stem = nn.Sequential(
                nn.Conv2d(3, stem, 7, 2, 3, bias=False),
                nn.BatchNorm2d(stem),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(3, 2, 1),
            )
        stages, cin = [], stem
        for i, blocks in enumerate(cfg.depth):
            planes = _channels(64 * 2**i, cfg.width)
            for j in range(blocks):
                stages.append(block(cin, planes, 2 if i > 0 and j == 0 else 1))
                cin = planes * block.expansion
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, cfg.classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class _ImageClassifier(TrainWorkload):
    """Cross-entropy on random images and labels; SGD with momentum unless a subclass says otherwise."""

    def make_batch(self) -> dict[str, torch.Tensor]:
        return _image_batch(self.cfg, self.batch_size, self.device)

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)

    def loss(self) -> torch.Tensor:
        return F.cross_entropy(self.model(self.batch["images"]), self.batch["labels"])


class ResNet18(_ImageClassifier):
    name = "resnet18"
    family = "resnet"
    default_batch_size = 32
    description = "ResNet-18 (basic blocks) image classification, ImageNet 224x224, SGD momentum"
    configs = {
        "tiny": VisionConfig(image=32, width=0.125, depth=(1, 1, 1, 1), classes=10, batch_size=2),
        "small": VisionConfig(image=64, width=0.25, depth=(2, 2, 2, 2), classes=100),
        "full": VisionConfig(image=224, width=1.0, depth=(2, 2, 2, 2), classes=1000),
    }

    def make_model(self) -> nn.Module:
        return ResNet(BasicBlock, self.cfg)


class ResNet18CIFAR(_ImageClassifier):
    name = "resnet18_cifar"
    family = "resnet"
    default_batch_size = 128
    description = "ResNet-18 for CIFAR-10 (3x3 stem, no max pool), 32x32 images, 10 classes, SGD momentum"
    # The CIFAR-10 ResNet-18 that image-classification benchmarks train (e.g. kuangliu/pytorch-cifar,
    # Gavel's ResNet-18 jobs): ImageNet's basic-block stages on 32 px images, about a third of the FLOPs
    # of the 224 px model per image, with the same 11M parameters.
    configs = {
        "tiny": VisionConfig(
            image=32, width=0.125, depth=(1, 1, 1, 1), classes=10, batch_size=2, stem="cifar"
        ),
        "small": VisionConfig(image=32, width=0.25, depth=(2, 2, 2, 2), classes=10, stem="cifar"),
        "full": VisionConfig(image=32, width=1.0, depth=(2, 2, 2, 2), classes=10, stem="cifar"),
    }

    def make_model(self) -> nn.Module:
        return ResNet(BasicBlock, self.cfg)

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)


class ResNet50(_ImageClassifier):
    name = "resnet50"
    family = "resnet"
    default_batch_size = 32
    description = "ResNet-50 (bottleneck v1.5) image classification, ImageNet 224x224, SGD momentum"
    configs = {
        "tiny": VisionConfig(image=32, width=0.125, depth=(1, 1, 1, 1), classes=10, batch_size=2),
        "small": VisionConfig(image=64, width=0.125, depth=(3, 4, 6, 3), classes=100),
        "full": VisionConfig(image=224, width=1.0, depth=(3, 4, 6, 3), classes=1000),
    }

    def make_model(self) -> nn.Module:
        return ResNet(Bottleneck, self.cfg)


class ResNet50Infer(InferWorkload):
    name = "resnet50_infer"
    family = "resnet"
    default_batch_size = 32
    description = "ResNet-50 batched inference (eval mode, no autograd), ImageNet 224x224"
    # Inference is about a third of a training step, so the small size runs larger images to stay timeable.
    configs = {
        **ResNet50.configs,
        "small": VisionConfig(image=128, width=0.125, depth=(3, 4, 6, 3), classes=100),
    }

    def make_model(self) -> nn.Module:
        return ResNet(Bottleneck, self.cfg)

    def make_batch(self) -> dict[str, torch.Tensor]:
        return _image_batch(self.cfg, self.batch_size, self.device)

    def forward(self) -> torch.Tensor:
        return self.model(self.batch["images"])


# --- VGG-16 (Simonyan & Zisserman 2015, configuration D) -----------------------------------------

_VGG16 = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")


class VGG(nn.Module):
    def __init__(self, cfg: VisionConfig) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for v in _VGG16:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                cout = _channels(v, cfg.width)
                layers += [nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(inplace=True)]
                cin = cout
        self.features = nn.Sequential(*layers)
        # The published head sees a 7x7 map at 224 px; smaller images keep whatever five pools leave.
        self.pool = max(1, cfg.image // 32)
        hidden = _channels(4096, cfg.width)
        self.classifier = nn.Sequential(
            nn.Linear(cin * self.pool * self.pool, hidden),
            nn.ReLU(inplace=True),
            nn.Dropout(),
            nn.Linear(hidden, hidden),
            nn.ReLU(inplace=True),
            nn.Dropout(),
            nn.Linear(hidden, cfg.classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(self.features(x), self.pool)
        return self.classifier(torch.flatten(x, 1))


class VGG16(_ImageClassifier):
    name = "vgg16"
    family = "vgg"
    default_batch_size = 32
    description = "VGG-16 (configuration D, no batch norm) image classification, ImageNet 224x224, SGD"
    configs = {
        "tiny": VisionConfig(image=32, width=0.0625, depth=(), classes=10, batch_size=2),
        "small": VisionConfig(image=32, width=0.1875, depth=(), classes=100),
        "full": VisionConfig(image=224, width=1.0, depth=(), classes=1000),
    }

    def make_model(self) -> nn.Module:
        return VGG(self.cfg)

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)


# --- MobileNetV2 (Sandler et al. 2018) -----------------------------------------------------------

# expansion t, output channels c, repeats n, first stride s
_MOBILENET_V2 = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                 (6, 320, 1, 1))


def _conv_bn(cin: int, cout: int, kernel: int, stride: int, groups: int = 1, act: bool = True) -> nn.Module:
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]
    if act:
        layers.append(nn.ReLU6(inplace=True))
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        layers = [] if expand == 1 else [_conv_bn(cin, hidden, 1, 1)]
        layers += [
            _conv_bn(hidden, hidden, 3, stride, groups=hidden),  # depthwise
            _conv_bn(hidden, cout, 1, 1, act=False),  # linear bottleneck: no ReLU6 on the projection
        ]
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x) if self.residual else self.block(x)


class MobileNetV2Net(nn.Module):
    def __init__(self, cfg: VisionConfig) -> None:
        super().__init__()
        cin = _channels(32, cfg.width)
        layers: list[nn.Module] = [_conv_bn(3, cin, 3, 2)]
        # cfg.depth caps the repeats per stage so the small size can be shallower with the same stages.
        for i, (t, c, n, s) in enumerate(_MOBILENET_V2):
            repeats = min(n, cfg.depth[i]) if cfg.depth else n
            cout = _channels(c, cfg.width)
            for j in range(repeats):
                layers.append(InvertedResidual(cin, cout, s if j == 0 else 1, t))
                cin = cout
        last = _channels(1280, max(1.0, cfg.width))
        layers.append(_conv_bn(cin, last, 1, 1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, cfg.classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


class MobileNetV2(_ImageClassifier):
    name = "mobilenet_v2"
    family = "mobilenet"
    default_batch_size = 64
    description = "MobileNetV2 (inverted residuals, depthwise convs) classification, 224x224, RMSprop"
    configs = {
        "tiny": VisionConfig(image=32, width=0.25, depth=(1, 1, 1, 1, 1, 1, 1), classes=10, batch_size=2),
        "small": VisionConfig(image=32, width=0.5, depth=(1, 2, 2, 2, 2, 2, 1), classes=100),
        "full": VisionConfig(image=224, width=1.0, depth=(), classes=1000),
    }

    def make_model(self) -> nn.Module:
        return MobileNetV2Net(self.cfg)

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        # The paper's recipe: RMSprop with decay and momentum 0.9, weight decay 4e-5. The large epsilon is
        # TensorFlow's (1.0 under the square root there): with PyTorch's 1e-8 the loss spikes tenfold.
        return torch.optim.RMSprop(
            model.parameters(), lr=0.045, alpha=0.9, eps=1e-3, momentum=0.9, weight_decay=4e-5
        )
