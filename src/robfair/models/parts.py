"""The model registry, the normalization wrapper, and argument checks shared by the architectures.

Every robfair model takes images in ``[0, 1]`` and returns logits; the per-channel normalization
lives *inside* the model (``Normalized``), so attacks and epsilons always work in pixel space.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from ..errors import ModelError
from ..registry import Registry

MODELS: Registry = Registry("model", ModelError)
"""name -> ``factory(num_classes, in_shape, **kwargs) -> nn.Module`` returning logits."""

#: what a loaded model carries about its file (class order, path), kept by every wrapper robfair adds
TAGS = ("robfair_classes", "robfair_source")


class Normalized(nn.Module):
    """``net((x - mean) / std)``: puts the input normalization inside the model.

    ``mean``/``std`` are per-channel sequences (length 1 or ``channels``), a number, or ``None``.
    ``None`` means no normalization (mean 0, std 1), which suits MNIST/digits-style data; pass the
    dataset statistics for CIFAR-style data (e.g. ``mean=(0.4914, 0.4822, 0.4465)``). Both are kept
    as float32 buffers shaped ``(1, C, 1, 1)``, so they follow ``.to(device)`` and live in the state dict.
    Works with ``channels_last`` inputs and under ``torch.autocast``.
    """

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, net: nn.Module, mean: Any = None, std: Any = None, *, channels: int | None = None) -> None:
        super().__init__()
        self.net = net
        m = channel_stats(mean, channels, "mean")
        s = channel_stats(std, channels, "std")
        if m is not None and s is not None and len(m) != len(s) and 1 not in (len(m), len(s)):
            raise ModelError(f"mean has {len(m)} values but std has {len(s)} (--mean/--std; Python: mean=/std=); "
                             "pass as many of each: 1, or one per channel")
        c = channels or max(len(m or [0.0]), len(s or [1.0]))
        m = m * c if m is not None and len(m) == 1 else m  # one value for every channel
        s = s * c if s is not None and len(s) == 1 else s
        self.register_buffer("mean", torch.tensor(m or [0.0] * c, dtype=torch.float32).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(s or [1.0] * c, dtype=torch.float32).view(1, -1, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net((x - self.mean) / self.std)


def channel_stats(value: Any, channels: int | None, what: str) -> list[float] | None:
    """Turn a mean/std given as a number, sequence or tensor into ``channels`` floats (or None)."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        value = value.detach().flatten().tolist()
    elif hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # numpy arrays / scalars
        value = value.tolist()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)) or not value:
        raise ModelError(f"{what} {value!r} is not a number or per-channel list; pass e.g. {what}=(0.5, 0.5, 0.5)")
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) for v in value):
        raise ModelError(f"{what} {list(value)!r} must hold finite numbers; pass e.g. {what}=(0.5, 0.5, 0.5)")
    out = [float(v) for v in value]
    if channels is not None and len(out) == 1:
        out = out * channels
    if channels is not None and len(out) != channels:
        raise ModelError(
            f"{what} has {len(out)} values but the images have {channels} channels; pass 1 or {channels} values"
        )
    if what == "std" and min(out) <= 0:
        raise ModelError(f"std {out} must be positive; pass the per-channel standard deviation of the data")
    return out


# ----------------------------------------------------------------------------------------------
# argument checks used by the factories: each raises a one-line ModelError naming the fix


def check_num_classes(num_classes: Any) -> int:
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise ModelError(f"num_classes must be an integer >= 2, got {num_classes!r}; pass the dataset's class count")
    return int(num_classes)


def check_in_shape(in_shape: Any) -> tuple[int, int, int]:
    try:
        shape = tuple(in_shape)
    except TypeError:
        shape = ()
    if len(shape) != 3 or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in shape):
        raise ModelError(
            f"in_shape must be (channels, height, width) of positive integers, got {in_shape!r}; "
            "pass e.g. (3, 32, 32) or dataset.in_shape"
        )
    return tuple(int(d) for d in shape)  # type: ignore[return-value]


def positive_int(model: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelError(f"{model}: {name} must be a positive integer, got {value!r}")
    return int(value)


def dropout_rate(model: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ModelError(f"{model}: dropout must be a number in [0, 1), got {value!r}")
    return float(value)


def fmt_shape(shape: Sequence[int]) -> str:
    return "x".join(str(int(d)) for d in shape)


# ----------------------------------------------------------------------------------------------
# normalization presets (``--mean cifar10``, ``audit(..., mean="imagenet")``)

#: per-channel (mean, std) of the usual training sets
NORMALIZATION_PRESETS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2471, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    "imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
}


def preset_key(name: str) -> str | None:
    """The :data:`NORMALIZATION_PRESETS` key a name means (case, ``-`` and ``_`` ignored: ``CIFAR-10``
    is ``cifar10``), None for no preset."""
    key = name.strip().lower().replace("-", "").replace("_", "")
    return key if key in NORMALIZATION_PRESETS else None


def resolve_normalization(mean: Any, std: Any) -> tuple[Any, Any]:
    """``mean``/``std`` with preset names (``"cifar10"``, ``"cifar100"``, ``"imagenet"``) replaced by
    their values; a preset given for one of the two fills the other. Numbers need both."""
    presets = {}
    for what, v in (("mean", mean), ("std", std)):
        if isinstance(v, str):
            key = preset_key(v)
            if key is None:
                raise ModelError(f"normalization {what} {v!r} is not a number or a known preset; use a preset "
                                 f"({', '.join(NORMALIZATION_PRESETS)}) or numbers, e.g. {what}=(0.5, 0.5, 0.5)")
            presets[what] = NORMALIZATION_PRESETS[key]
    if "mean" in presets:
        mean = presets["mean"][0]
        std = presets["mean"][1] if std is None else std
    if "std" in presets:
        std = presets["std"][1]
        mean = presets["std"][0] if mean is None else mean
    if (mean is None) != (std is None):
        missing = "std" if std is None else "mean"
        raise ModelError(f"normalization needs both mean and std (--mean and --std; Python: mean= and std=); pass "
                         f"{missing} too, or a preset for either: {', '.join(NORMALIZATION_PRESETS)}")
    return mean, std


def own_module(model: nn.Module) -> nn.Module:
    """The user's own module inside robfair's ``Normalized`` wrappers (the --mean / --std ones peeled)."""
    while isinstance(model, Normalized):
        model = model.net
    return model


def with_normalization(model: nn.Module, mean: Any, std: Any, channels: int | None = None) -> nn.Module:
    """``Normalized(model, mean, std)`` for a model that expects normalized inputs (presets allowed);
    ``model`` itself when both are None. Refuses a robfair model that already normalizes."""
    mean, std = resolve_normalization(mean, std)
    if mean is None:
        return model
    spec = getattr(model, "robfair_spec", None)
    if isinstance(spec, dict) and (spec.get("mean") is not None or spec.get("std") is not None):
        raise ModelError(f"this robfair model already normalizes its inputs (mean {spec.get('mean')}, std {spec.get('std')}); "
                         "drop --mean/--std (mean=/std=) or the inputs are normalized twice")
    wrapped = Normalized(model, mean, std, channels=channels)
    wrapped.training = model.training  # the flag only: audit() restores the user's mode, not a new module's
    return copy_tags(model, wrapped)


def copy_tags(src: Any, dst: nn.Module) -> nn.Module:
    """``dst`` with ``src``'s :data:`TAGS` (the class order and file a wrapper's model came with)."""
    for attr in TAGS:
        if hasattr(src, attr):
            try:
                setattr(dst, attr, getattr(src, attr))
            except (AttributeError, RuntimeError, TypeError):  # a ScriptModule refusing new attributes
                pass
    return dst
