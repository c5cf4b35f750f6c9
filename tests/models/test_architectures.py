"""Every registered architecture: output shape for several image sizes / class counts (parametrized
over the registry); the built-ins: parameter counts against published values, FLOPs against
hand-computed multiply-accumulate counts, argument validation."""

from __future__ import annotations

import pytest
import torch

from robfair.errors import ModelError
from robfair.models import MODELS, count_flops, create

SHAPES = [(1, 8, 8), (1, 28, 28), (3, 32, 32), (2, 12, 16)]
CLASSES = {(1, 8, 8): 10, (1, 28, 28): 2, (3, 32, 32): 100, (2, 12, 16): 7}
# options the registrations' own builds do not exercise (each registration runs at contract_kwargs)
VARIANTS = [
    ("mlp", {"hidden": [32], "dropout": 0.1}),
    ("preact-resnet18", {"width": 8}),
    ("wrn", {"depth": 10, "widen": 1}),
    ("wrn", {"depth": 16, "widen": 1, "dropout": 0.3}),
]


SMALL_SHAPES = [(1, 8, 8), (2, 12, 16)]


def registered_builds() -> list:
    """(name, kwargs, in_shape) for every registered architecture at its ``contract_kwargs`` and every
    shape; a registration with ``contract_shape`` (a large model, built small for its contract) runs
    at the small shapes only. A new model file is picked up here."""
    return [pytest.param(e.name, e.meta.get("contract_kwargs", {}), s, id=f"{e.name}-{s}")
            for e in MODELS for s in (SMALL_SHAPES if "contract_shape" in e.meta else SHAPES)]


def check_forward_shape(name: str, kwargs: dict, in_shape: tuple) -> None:
    torch.manual_seed(0)
    k = CLASSES[in_shape]
    model = create(name, k, in_shape, **kwargs).eval()
    with torch.no_grad():
        out = model(torch.rand(2, *in_shape))
    assert out.shape == (2, k) and out.dtype == torch.float32, (name, in_shape, out.shape)
    assert torch.isfinite(out).all(), (name, in_shape)


@pytest.mark.parametrize("name,kwargs,in_shape", registered_builds() + [
    pytest.param(n, kw, s, id=f"{n}-{kw}-{s}") for n, kw in VARIANTS for s in SHAPES])
def test_forward_shape(name, kwargs, in_shape):
    """Every architecture takes 1-3 channels, small / square / non-square images and any class count."""
    check_forward_shape(name, kwargs, in_shape)


DUMMY = '''
from torch import nn

from robfair.models.parts import MODELS


@MODELS.register("dummy-pool", help="test only: conv, global average pool, linear")
def dummy_pool(num_classes, in_shape):
    return nn.Sequential(nn.Conv2d(in_shape[0], 4, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(4, num_classes))
'''


def test_a_new_model_file_gets_the_shape_tests(monkeypatch, tmp_path):
    from _shared import drop_in

    assert drop_in(monkeypatch, tmp_path, "robfair.models", MODELS, "dummy_pool.py", DUMMY) == ["dummy-pool"]
    assert {p.values[2] for p in registered_builds() if p.values[0] == "dummy-pool"} == set(SHAPES)
    for in_shape in SHAPES:
        check_forward_shape("dummy-pool", {}, in_shape)
    # and the check can fail: a model built for one image size only
    MODELS.add("dummy-fixed", lambda num_classes, in_shape: torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(64, num_classes)))
    check_forward_shape("dummy-fixed", {}, (1, 8, 8))
    with pytest.raises(Exception):
        check_forward_shape("dummy-fixed", {}, (3, 32, 32))


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


def test_the_builtin_model_files_register_themselves():
    # discovery (robfair.registry.import_submodules) found the package's own files; any further
    # registration is covered by the registry-parametrized tests here and in test_model_contract.py
    assert {"mlp", "smallcnn", "cifar-cnn", "preact-resnet18", "wrn", "wrn-34-10", "wrn-28-10"} <= set(MODELS.names())
