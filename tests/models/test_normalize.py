"""Normalization inside the model (hand-computed), channels_last and bf16 autocast on CPU."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robfair.errors import ModelError
from robfair.models import Normalized, create


def test_normalized_hand_computed():
    m = Normalized(nn.Identity(), mean=(0.5, 0.25), std=(0.5, 0.25))
    x = torch.tensor([1.0, 0.0]).view(1, 2, 1, 1).expand(1, 2, 2, 2)
    out = m(x)
    assert torch.equal(out[0, 0], torch.full((2, 2), 1.0))  # (1 - 0.5) / 0.5
    assert torch.equal(out[0, 1], torch.full((2, 2), -1.0))  # (0 - 0.25) / 0.25
    assert m.mean.shape == (1, 2, 1, 1) and m.std.shape == (1, 2, 1, 1)
    assert set(m.state_dict()) >= {"mean", "std"}


def test_default_is_identity_and_scalars_broadcast():
    m = Normalized(nn.Identity(), channels=3)
    x = torch.rand(2, 3, 4, 4)
    assert torch.equal(m(x), x)
    m = Normalized(nn.Identity(), mean=0.5, std=2, channels=3)
    assert torch.allclose(m(torch.ones(1, 3, 1, 1)), torch.full((1, 3, 1, 1), 0.25))


def test_create_normalizes_before_the_network():
    model = create("mlp", 3, (3, 2, 2), mean=(0.1, 0.2, 0.3), std=(0.5, 0.25, 0.125))
    seen = {}
    model.net.register_forward_pre_hook(lambda mod, args: seen.setdefault("x", args[0].clone()))
    x = torch.rand(2, 3, 2, 2)
    model(x)
    want = torch.stack([(x[:, 0] - 0.1) / 0.5, (x[:, 1] - 0.2) / 0.25, (x[:, 2] - 0.3) / 0.125], 1)
    assert torch.allclose(seen["x"], want, atol=1e-6)
    assert model.robfair_spec["mean"] == [0.1, 0.2, 0.3]


@pytest.mark.parametrize("mean,std,match", [
    ((0.5, 0.5), None, "2 values but the images have 3 channels"),
    (None, (1.0, 0.0, 1.0), "std .* must be positive"),
    ("x", None, "not a number"),
    ((float("nan"),), None, "finite"),
])
def test_bad_statistics(mean, std, match):
    with pytest.raises(ModelError, match=match):
        create("mlp", 3, (3, 4, 4), mean=mean, std=std)


# channels_last and bf16 autocast for every registered model: tests/models/test_model_contract.py
