"""Tiny test models and data for the attack tests (float64 where exactness matters)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch import nn


@dataclass
class BinaryLinear:
    """logits = [0, w.x + b]: predicted class 1 iff the margin m = w.x + b > 0."""

    model: nn.Module
    w: torch.Tensor
    b: float
    x: torch.Tensor
    y: torch.Tensor

    def margin(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1) @ self.w + self.b


def make_binary_linear(n: int = 400, d: int = 20, seed: int = 0, shape: tuple[int, ...] | None = None) -> BinaryLinear:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(d, generator=g, dtype=torch.float64)
    w = w + 0.2 * w.sign()  # no coordinate near 0: every sign step moves every pixel
    b = float(-0.5 * w.sum())  # the boundary passes through the centre of the box
    lin = nn.Linear(d, 2, dtype=torch.float64)
    with torch.no_grad():
        lin.weight.zero_()
        lin.weight[1] = w
        lin.bias.zero_()
        lin.bias[1] = b
    model = nn.Sequential(nn.Flatten(), lin)
    # pixels in [0.3, 0.7]: with eps <= 0.1 (L-inf) the [0, 1] clamp never binds
    x = 0.3 + 0.4 * torch.rand(n, d, generator=g, dtype=torch.float64)
    m = x @ w + b
    y = ((m + 0.3 * torch.randn(n, generator=g, dtype=torch.float64)) > 0).long()  # ~some clean mistakes
    if shape is not None:
        x = x.reshape((n,) + shape)
    return BinaryLinear(model, w, b, x, y)


@pytest.fixture
def binary_linear() -> BinaryLinear:
    return make_binary_linear()


def make_mlp(d: int = 20, k: int = 5, hidden: int = 32, seed: int = 0, dtype=torch.float64) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, k)).to(dtype)


class MixedModes(nn.Module):
    """A small conv net with BatchNorm and Dropout; records whether every submodule was in eval
    mode at each forward."""

    def __init__(self, k: int = 4) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.bn = nn.BatchNorm2d(6)
        self.drop = nn.Dropout(0.5)
        self.head = nn.Linear(6 * 4 * 4, k)
        self.seen_training: list[bool] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen_training.append(any(m.training for m in self.modules()))
        h = self.drop(torch.relu(self.bn(self.conv(x))))
        return self.head(h.flatten(1))


@pytest.fixture
def mixed_model() -> MixedModes:
    torch.manual_seed(0)
    m = MixedModes()
    m.train()
    m.bn.eval()  # mixed: the BatchNorm frozen, the rest training
    with torch.no_grad():  # non-trivial running stats
        m.bn.running_mean.uniform_(-0.1, 0.1)
        m.bn.running_var.uniform_(0.5, 1.5)
    return m


@pytest.fixture
def images() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """16 images 3x4x4 touching the [0, 1] edges, labels, and per-sample eps from 0 to 2."""
    g = torch.Generator().manual_seed(1)
    x = torch.rand(16, 3, 4, 4, generator=g)
    x[0] = 0.0
    x[1] = 1.0
    y = torch.randint(0, 4, (16,), generator=g)
    eps = torch.tensor([0.0, 0.5, 0.0, 8 / 255, 0.03, 0.1, 0.3, 2.0] * 2)
    return x, y, eps


@pytest.fixture
def linear_factory():
    return make_binary_linear


@pytest.fixture
def mlp_factory():
    return make_mlp
