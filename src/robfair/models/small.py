"""Small networks: an MLP, a size-adaptive CNN for digits/MNIST/CIFAR, and the ~50 MFLOP CIFAR CNN."""

from __future__ import annotations

from typing import Any

from torch import nn

from ..errors import ModelError
from .parts import MODELS, dropout_rate, positive_int


@MODELS.register("mlp", help="Multilayer perceptron: flatten, hidden Linear+ReLU layers, linear head.")
def mlp(num_classes: int, in_shape: tuple[int, int, int], *, hidden: Any = (256, 256), dropout: float = 0.0) -> nn.Module:
    """``hidden``: widths of the hidden layers (``()`` gives a linear model); ``dropout`` after each."""
    if isinstance(hidden, int) and not isinstance(hidden, bool):
        hidden = (hidden,)
    if not isinstance(hidden, (list, tuple)):
        raise ModelError(f"mlp: hidden must be a list of layer widths, got {hidden!r}; pass e.g. hidden=[256, 256]")
    widths = [positive_int("mlp", "each hidden width", h) for h in hidden]
    p = dropout_rate("mlp", dropout)
    c, h, w = in_shape
    layers: list[nn.Module] = [nn.Flatten()]
    d = c * h * w
    for width in widths:
        layers += [nn.Linear(d, width), nn.ReLU(inplace=True)]
        if p > 0:
            layers.append(nn.Dropout(p))
        d = width
    layers.append(nn.Linear(d, num_classes))
    return nn.Sequential(*layers)


def _conv_relu(cin: int, cout: int, bn: bool) -> list[nn.Module]:
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, 3, padding=1, bias=not bn)]
    if bn:
        layers.append(nn.BatchNorm2d(cout))
    layers.append(nn.ReLU(inplace=True))
    return layers


def _two_stage_cnn(in_shape: tuple[int, int, int], width: int, bn: bool) -> tuple[nn.Sequential, int, int]:
    """[conv conv pool] x 2 at widths (width, 2*width); a stage pools only while the side is >= 2.
    Returns the feature extractor and the output height and width."""
    c, h, w = in_shape
    layers: list[nn.Module] = []
    for cin, cout in ((c, width), (width, 2 * width)):
        layers += _conv_relu(cin, cout, bn) + _conv_relu(cout, cout, bn)
        if min(h, w) >= 2:
            layers.append(nn.MaxPool2d(2))
            h, w = h // 2, w // 2
    return nn.Sequential(*layers), h, w


@MODELS.register(
    "smallcnn",
    help="Small CNN for any image size and channel count (8x8 digits in seconds, 28x28, 32x32).",
)
def smallcnn(num_classes: int, in_shape: tuple[int, int, int], *, width: int = 32, hidden: int = 256) -> nn.Module:
    """conv(w)-conv(w)-pool-conv(2w)-conv(2w)-pool, adaptive average pooling to at most 4x4,
    then Linear(hidden)-ReLU-Linear. No batch norm, so train and eval mode compute the same function.
    About 3 MFLOP per 8x8 image and 50 MFLOP per 32x32 image at the default width 32."""
    width = positive_int("smallcnn", "width", width)
    hidden = positive_int("smallcnn", "hidden", hidden)
    features, h, w = _two_stage_cnn(in_shape, width, bn=False)
    ph, pw = min(h, 4), min(w, 4)
    return nn.Sequential(
        features,
        nn.AdaptiveAvgPool2d((ph, pw)),
        nn.Flatten(),
        nn.Linear(2 * width * ph * pw, hidden),
        nn.ReLU(inplace=True),
        nn.Linear(hidden, num_classes),
    )


@MODELS.register("cifar-cnn", help="~51 MFLOP CNN for 32x32x3 images (conv-BN-ReLU x4, two max-pools, 2 FC).")
def cifar_cnn(num_classes: int, in_shape: tuple[int, int, int]) -> nn.Module:
    """conv32-conv32-pool-conv64-conv64-pool (3x3, BN, ReLU) -> Linear(64*H/4*W/4, 256) -> Linear(K).

    On a 3x32x32 image it costs 51.1 MFLOP (2 x multiply-accumulates of conv and linear layers, as
    ``count_flops`` / ``torch.utils.flop_counter`` count them): the reference model of the attack
    benchmark. Other sizes work (the head is sized from ``in_shape``) but cost differs."""
    if min(in_shape[1:]) < 4:
        raise ModelError(f"cifar-cnn needs images of at least 4x4, got {in_shape[1]}x{in_shape[2]}; use smallcnn or mlp")
    features, h, w = _two_stage_cnn(in_shape, 32, bn=True)
    return nn.Sequential(
        features,
        nn.Flatten(),
        nn.Linear(64 * h * w, 256),
        nn.ReLU(inplace=True),
        nn.Linear(256, num_classes),
    )
