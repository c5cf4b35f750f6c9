"""A small CNN defined by the tests themselves, saved in every form ``--model`` accepts."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
import torch

ARCH_SRC = textwrap.dedent('''
    import torch
    from torch import nn


    class TinyNet(nn.Module):
        """A user's own CNN for 1x8x8 images (not a robfair architecture)."""

        def __init__(self, width=6, classes=3):
            super().__init__()
            self.features = nn.Sequential(nn.Conv2d(1, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
                                          nn.AdaptiveAvgPool2d(2), nn.Flatten())
            self.head = nn.Linear(4 * width, classes)

        def forward(self, x):
            return self.head(self.features(x))


    def build(width=6):
        return TinyNet(width=width)
''')


def calibrate(net, x):
    """Set TinyNet's BN statistics and head on inputs ``x`` (as the net will see them) so that all
    three classes are predicted: a stand-in for training."""
    with torch.no_grad():
        net.features[1].running_var.fill_(0.01)
        net.features[1].running_mean.copy_(net.features[0](x).mean((0, 2, 3)))
        net.head.weight.mul_(5)
        net.head.bias.sub_(net(x).mean(0))
    return net


@pytest.fixture(name="calibrate")
def calibrate_fixture():
    return calibrate


@pytest.fixture(scope="session")
def arch_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("arch") / "tinynet.py"
    path.write_text(ARCH_SRC)
    return path


@pytest.fixture(scope="session")
def tiny(arch_file):
    """(module class, a trained-ish instance with random BN statistics, the npz data file)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("tinynet_for_tests", arch_file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    net = calibrate(mod.TinyNet(width=5).eval(), torch.rand(200, 1, 8, 8, generator=torch.Generator().manual_seed(1)))
    return mod, net


@pytest.fixture(scope="session")
def data_npz(tmp_path_factory, tiny):
    """60 images whose labels are the net's own clean predictions on 2/3 of them (so accuracy is
    high but not 1 and the attack has something to do)."""
    _, net = tiny
    rng = np.random.default_rng(0)
    x = rng.random((60, 1, 8, 8)).astype(np.float32)
    with torch.no_grad():
        pred = net(torch.from_numpy(x)).argmax(1).numpy()
    y = pred.copy()
    y[::3] = (y[::3] + 1) % 3
    path = tmp_path_factory.mktemp("data") / "tiny.npz"
    np.savez(path, x=x, y=y, classes=np.array(["a", "b", "c"]))
    return path
