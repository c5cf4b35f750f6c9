"""PreAct-ResNet-18 and WideResNet, as used in the adversarial-robustness literature.

PreActResNet-18 follows locuslab/fast_adversarial (the variant FRL/CFA/TRADES-style code uses: a final
BN-ReLU before pooling); WideResNet follows the TRADES / xternalz implementation. Both end with
adaptive average pooling, so 32x32 (CIFAR/SVHN), 28x28 (MNIST, 1 channel) and smaller inputs all work.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ModelError
from .parts import MODELS, dropout_rate, positive_int


def _conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


class PreActBlock(nn.Module):
    """BN-ReLU-conv-BN-ReLU-conv with an identity (or 1x1 conv on the activated input) shortcut."""

    def __init__(self, cin: int, cout: int, stride: int = 1, dropout: float = 0.0) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(cin)
        self.conv1 = _conv3x3(cin, cout, stride)
        self.bn2 = nn.BatchNorm2d(cout)
        self.conv2 = _conv3x3(cout, cout)
        self.dropout = dropout
        self.shortcut = nn.Conv2d(cin, cout, 1, stride=stride, bias=False) if stride != 1 or cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(x))
        shortcut = x if self.shortcut is None else self.shortcut(out)
        out = F.relu(self.bn2(self.conv1(out)))
        if self.dropout > 0:
            out = F.dropout(out, p=self.dropout, training=self.training)
        return self.conv2(out) + shortcut


class PreActResNet(nn.Module):
    """Pre-activation ResNet with ``blocks`` per stage at widths w, 2w, 4w, 8w (strides 1, 2, 2, 2)."""

    def __init__(self, blocks: tuple[int, ...], num_classes: int, in_channels: int, width: int = 64) -> None:
        super().__init__()
        self.conv1 = _conv3x3(in_channels, width)
        stages, cin = [], width
        for i, n in enumerate(blocks):
            cout = width * 2**i
            stride = 2 if i else 1
            stages.append(nn.Sequential(*[PreActBlock(cin if j == 0 else cout, cout, stride if j == 0 else 1) for j in range(n)]))
            cin = cout
        self.layers = nn.Sequential(*stages)
        self.bn = nn.BatchNorm2d(cin)
        self.linear = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn(self.layers(self.conv1(x))))
        return self.linear(torch.flatten(F.adaptive_avg_pool2d(out, 1), 1))


@MODELS.register("preact-resnet18", help="PreAct-ResNet-18 (11.2M parameters), the FRL/CFA/TRADES baseline.")
def preact_resnet18(num_classes: int, in_shape: tuple[int, int, int], *, width: int = 64) -> nn.Module:
    """``width``: channels of the first stage (64 in the literature; smaller for quick experiments)."""
    return PreActResNet((2, 2, 2, 2), num_classes, in_shape[0], positive_int("preact-resnet18", "width", width))


class WideResNet(nn.Module):
    """WRN-depth-widen (Zagoruyko & Komodakis): 3 stages of (depth-4)/6 pre-activation blocks at widths
    16k, 32k, 64k; kaiming-normal (fan-out) init as in the TRADES code."""

    def __init__(self, depth: int, widen: int, num_classes: int, in_channels: int, dropout: float = 0.0) -> None:
        super().__init__()
        n = (depth - 4) // 6
        widths = [16, 16 * widen, 32 * widen, 64 * widen]
        self.conv1 = _conv3x3(in_channels, widths[0])
        stages = []
        for i in range(3):
            cin, cout, stride = widths[i], widths[i + 1], 1 if i == 0 else 2
            blocks = [PreActBlock(cin if j == 0 else cout, cout, stride if j == 0 else 1, dropout) for j in range(n)]
            stages.append(nn.Sequential(*blocks))
        self.layers = nn.Sequential(*stages)
        self.bn = nn.BatchNorm2d(widths[3])
        self.fc = nn.Linear(widths[3], num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                fan_out = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                nn.init.normal_(m.weight, 0.0, math.sqrt(2.0 / fan_out))
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn(self.layers(self.conv1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(out, 1), 1))


@MODELS.register("wrn", help="WideResNet-depth-widen; depth = 6n+4 (10, 16, 22, 28, 34, ...), optional dropout.",
                 contract_kwargs={"depth": 10, "widen": 2})  # the presets below test the full sizes
def wrn(num_classes: int, in_shape: tuple[int, int, int], *, depth: int = 34, widen: int = 10, dropout: float = 0.0) -> nn.Module:
    """``depth`` must be 6n+4; ``widen`` multiplies the widths 16/32/64; ``dropout`` inside each block."""
    depth = positive_int("wrn", "depth", depth)
    if depth < 10 or (depth - 4) % 6:
        raise ModelError(f"wrn: depth {depth} is not valid; depth must be 6n+4: 10, 16, 22, 28, 34, 40, ...")
    return WideResNet(depth, positive_int("wrn", "widen", widen), num_classes, in_shape[0], dropout_rate("wrn", dropout))


@MODELS.register("wrn-34-10", help="WideResNet-34-10 (46.2M parameters), the TRADES/AutoAttack reference model.",
                 contract_shape=(3, 8, 8))  # 46M parameters: the contract tests' forwards on 8x8 images
def wrn_34_10(num_classes: int, in_shape: tuple[int, int, int], *, dropout: float = 0.0) -> nn.Module:
    """Depth and width are fixed; use model ``wrn`` with depth=/widen= to change them."""
    return wrn(num_classes, in_shape, depth=34, widen=10, dropout=dropout)


@MODELS.register("wrn-28-10", help="WideResNet-28-10 (36.5M parameters).", contract_shape=(3, 8, 8))
def wrn_28_10(num_classes: int, in_shape: tuple[int, int, int], *, dropout: float = 0.0) -> nn.Module:
    """Depth and width are fixed; use model ``wrn`` with depth=/widen= to change them."""
    return wrn(num_classes, in_shape, depth=28, widen=10, dropout=dropout)
