"""Small shared fixtures: affine models on interior data (the [0, 1] box never binds)."""

from __future__ import annotations

import pytest
import torch

from robfair.data import Dataset
from robfair.models import create


def linear_setup(num_classes: int = 2, d: int = 6, n: int = 96, seed: int = 0, spread: float = 0.1):
    """An affine robfair model (``mlp`` with no hidden layer) and a dataset in [0.4, 0.6]^d labelled
    by the model itself for most samples (a few flipped, so some clean mistakes exist), with two groups."""
    torch.manual_seed(seed)
    model = create("mlp", num_classes, (1, 1, d), hidden=[])
    lin = model.net[1]
    with torch.no_grad():  # every class boundary passes near the centre of the data
        lin.bias.copy_(-lin.weight @ torch.full((d,), 0.5) + 0.01 * torch.randn(num_classes))
    gen = torch.Generator().manual_seed(seed)
    x = 0.5 - spread + 2 * spread * torch.rand((n, 1, 1, d), generator=gen)
    with torch.no_grad():
        y = model(x).argmax(1)
    y[::11] = (y[::11] + 1) % num_classes  # clean mistakes
    g = (torch.arange(n) % 3 == 0).long()
    ds = Dataset(x=x, y=y, classes=[f"c{k}" for k in range(num_classes)], g=g, groups=["major", "minor"])
    return model.eval(), ds.validate()


@pytest.fixture
def linear_factory():
    return linear_setup


@pytest.fixture
def linear2():
    return linear_setup(2)


@pytest.fixture
def linear4():
    return linear_setup(4, d=5, seed=1)
