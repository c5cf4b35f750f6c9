"""Every architecture: output shape for several image sizes / class counts, parameter counts against
published values, FLOPs against hand-computed multiply-accumulate counts, argument validation."""

from __future__ import annotations

import pytest
import torch

from robfair.errors import ModelError
from robfair.models import MODELS, count_flops, create

SMALL = [
    ("mlp", {}),
    ("mlp", {"hidden": [32], "dropout": 0.1}),
    ("smallcnn", {}),
    ("cifar-cnn", {}),
    ("preact-resnet18", {"width": 8}),
    ("wrn", {"depth": 10, "widen": 1}),
    ("wrn", {"depth": 16, "widen": 1, "dropout": 0.3}),
]
SHAPES = [(1, 8, 8), (1, 28, 28), (3, 32, 32), (2, 12, 16)]


@pytest.mark.parametrize("name,kwargs", SMALL)
@pytest.mark.parametrize("in_shape", SHAPES)
def test_forward_shape(name, kwargs, in_shape):
    torch.manual_seed(0)
    k = {(1, 8, 8): 10, (1, 28, 28): 2, (3, 32, 32): 100, (2, 12, 16): 7}[in_shape]
    model = create(name, k, in_shape, **kwargs).eval()
    out = model(torch.rand(2, *in_shape))
    assert out.shape == (2, k) and out.dtype == torch.float32
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name,kwargs", SMALL)
def test_input_gradient_flows_and_train_mode_runs(name, kwargs):
    model = create(name, 3, (3, 32, 32), **kwargs).train()
    x = torch.rand(4, 3, 32, 32, requires_grad=True)
    (g,) = torch.autograd.grad(model(x).logsumexp(1).sum(), x)
    assert g.shape == x.shape and g.abs().sum() > 0


def test_preact_resnet18_default_forward_and_parameter_count():
    model = create("preact-resnet18", 10, (3, 32, 32))

    def block(cin, cout):  # bn1, conv1, bn2, conv2 (+ 1x1 shortcut when the width changes)
        return 2 * cin + 9 * cin * cout + 2 * cout + 9 * cout * cout + (cin * cout if cin != cout else 0)

    widths = [64, 64, 128, 256, 512]
    hand = 9 * 3 * 64 + sum(block(widths[i], widths[i + 1]) + block(widths[i + 1], widths[i + 1]) for i in range(4))
    hand += 2 * 512 + 512 * 10 + 10  # final BN (locuslab/fast_adversarial variant) and linear head
    assert hand == 11_172_170  # the "11.17M" of the literature
    assert sum(p.numel() for p in model.parameters()) == hand
    assert model.eval()(torch.rand(1, 3, 32, 32)).shape == (1, 10)
    assert create("preact-resnet18", 10, (1, 28, 28)).eval()(torch.rand(1, 1, 28, 28)).shape == (1, 10)


@pytest.mark.parametrize("name,params", [("wrn-34-10", 46_160_474), ("wrn-28-10", 36_479_194)])
def test_wide_resnet_presets_parameter_count(name, params):
    # published sizes: WRN-34-10 46.16M, WRN-28-10 36.48M (10 classes); built on meta: no memory, no forward
    with torch.device("meta"):
        model = create(name, 10, (3, 32, 32))
        same = create("wrn", 10, (3, 32, 32), depth=int(name.split("-")[1]), widen=10)
    assert sum(p.numel() for p in model.parameters()) == params
    assert sum(p.numel() for p in same.parameters()) == params
    assert model.robfair_spec["kwargs"] == {"dropout": 0.0}


@pytest.mark.parametrize("depth", [12, 33, 4, 0])
def test_wrn_rejects_invalid_depth(depth):
    with pytest.raises(ModelError, match=r"6n\+4.*28, 34"):
        create("wrn", 10, (3, 32, 32), depth=depth, widen=1) if depth else create("wrn", 10, (3, 32, 32), depth=7)


def test_wrn_preset_refuses_depth_and_points_to_wrn():
    with pytest.raises(ModelError, match=r"no argument 'depth'.*dropout.*use model 'wrn'"):
        create("wrn-34-10", 10, (3, 32, 32), depth=28)


@pytest.mark.parametrize("kwargs,match", [
    ({"dropout": 1.5}, "dropout"),
    ({"hidden": "wide"}, "hidden"),
    ({"hidden": [16, 0]}, "hidden width"),
])
def test_bad_argument_values(kwargs, match):
    with pytest.raises(ModelError, match=match):
        create("mlp", 10, (1, 8, 8), **kwargs)


def test_cifar_cnn_flops_hand_computed():
    model = create("cifar-cnn", 10, (3, 32, 32))
    macs = (
        32 * 32 * 32 * 3 * 9      # conv 3->32 at 32x32
        + 32 * 32 * 32 * 32 * 9   # conv 32->32 at 32x32
        + 16 * 16 * 64 * 32 * 9   # conv 32->64 at 16x16
        + 16 * 16 * 64 * 64 * 9   # conv 64->64 at 16x16
        + 64 * 8 * 8 * 256        # fc 4096->256
        + 256 * 10                # fc 256->10
    )
    flops = count_flops(model, (3, 32, 32))
    assert flops == 2 * macs
    assert 35e6 <= flops <= 70e6


def test_count_flops_mlp_closed_form_and_restores_mode():
    model = create("mlp", 5, (2, 4, 4), hidden=[7, 3]).train()
    assert count_flops(model, (2, 4, 4)) == 2 * (32 * 7 + 7 * 3 + 3 * 5)
    assert model.training


def test_every_registered_model_is_covered():
    assert set(MODELS.names()) == {"mlp", "smallcnn", "cifar-cnn", "preact-resnet18", "wrn", "wrn-34-10", "wrn-28-10"}
