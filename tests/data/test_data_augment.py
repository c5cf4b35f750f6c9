"""On-device batch augmentation (robfair.data.augment)."""

import torch

import robfair.training
from robfair.data import random_crop_flip


def test_random_crop_flip_is_a_padded_crop():
    x = torch.rand(6, 2, 5, 4)
    g = torch.Generator().manual_seed(0)
    out = random_crop_flip(x, 2, g)
    assert out.shape == x.shape
    padded = torch.nn.functional.pad(x, (2, 2, 2, 2))
    flips = 0
    for i in range(6):
        windows = [padded[i, :, r:r + 5, c:c + 4] for r in range(5) for c in range(5)]
        plain = any(torch.equal(out[i], w) for w in windows)
        flipped = any(torch.equal(out[i], w.flip(-1)) for w in windows)
        assert plain or flipped
        flips += flipped and not plain
    assert 0 < flips < 6  # both branches happen for this seed
    same = random_crop_flip(x, 2, torch.Generator().manual_seed(0))
    assert torch.equal(out, same)
    assert torch.equal(random_crop_flip(x, 0, g).flatten(0, 1).sort(-1)[0], x.flatten(0, 1).sort(-1)[0])


def test_the_training_package_exports_the_same_function():
    assert robfair.training.random_crop_flip is random_crop_flip
