"""Building models by name, checking them against data, describing them, and counting FLOPs."""

from __future__ import annotations

import inspect
from typing import Any, Callable, NamedTuple

import torch
from torch import nn
from torch.nn.parallel import DataParallel, DistributedDataParallel
from torch.optim.swa_utils import AveragedModel
from torch.utils.flop_counter import FlopCounterMode

from ..errors import ModelError
from .parts import MODELS, Normalized, channel_stats, resolve_normalization, check_in_shape, check_num_classes, fmt_shape


def _factory_kwargs(factory: Callable[..., nn.Module]) -> dict[str, Any]:
    """The keyword arguments a factory accepts, with their defaults."""
    return {
        p.name: p.default
        for p in inspect.signature(factory).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }


def check_model_args(name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """ModelError (one line) when architecture ``name`` does not exist or takes no argument of
    ``kwargs``; returns the arguments it accepts with their defaults. Needs no data: a study's
    ``model_kwargs`` typo fails at ``sweep --dry-run``, not in every worker."""
    entry = MODELS.entry(name)
    accepted = _factory_kwargs(entry.obj)
    for key in kwargs:
        if key not in accepted:
            valid = ", ".join(accepted) if accepted else "none"
            hint = "; use model 'wrn' to set depth/widen" if entry.name.startswith("wrn-") else ""
            raise ModelError(f"model '{entry.name}' has no argument '{key}'; valid arguments: {valid}{hint}")
    return accepted


def _plain(value: Any, where: str) -> Any:
    """A JSON-able copy (tuples become lists) or a ModelError: specs must survive a checkpoint."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v, where) for v in value]
    raise ModelError(f"{where} is a {type(value).__name__}; model arguments must be numbers, strings, bools or lists")


def create(
    name: str,
    num_classes: int,
    in_shape: tuple[int, int, int],
    *,
    mean: Any = None,
    std: Any = None,
    **kwargs: Any,
) -> Normalized:
    """Build model ``name`` for ``num_classes`` classes and ``in_shape = (C, H, W)`` images in [0, 1].

    The network is wrapped as ``Normalized(net, mean, std)`` (``None`` = no normalization) and
    carries ``model.robfair_spec`` (plain JSON-able values) so ``save_checkpoint`` can rebuild it.
    ``kwargs`` are the architecture's arguments (see ``describe_models()``)::

        model = create("preact-resnet18", 10, (3, 32, 32), mean=(0.4914, 0.4822, 0.4465), std=(0.2471, 0.2435, 0.2616))
        model = create("wrn", 10, (3, 32, 32), depth=28, widen=4)
    """
    entry = MODELS.entry(name)
    num_classes = check_num_classes(num_classes)
    in_shape = check_in_shape(in_shape)
    accepted = check_model_args(name, kwargs)
    resolved = {k: _plain(v, f"model argument '{k}'") for k, v in {**accepted, **kwargs}.items()}
    if isinstance(mean, str) or isinstance(std, str):  # a preset: "cifar10", "cifar100", "imagenet"
        mean, std = resolve_normalization(mean, std)
    mean_l = channel_stats(mean, in_shape[0], "mean")
    std_l = channel_stats(std, in_shape[0], "std")
    net = entry.obj(num_classes, in_shape, **kwargs)
    model = Normalized(net, mean_l, std_l, channels=in_shape[0])
    model.robfair_spec = {
        "name": entry.name,
        "num_classes": num_classes,
        "in_shape": list(in_shape),
        "kwargs": resolved,
        "mean": mean_l,
        "std": std_l,
    }
    return model


class ModelInfo(NamedTuple):
    """One row of ``describe_models()``."""

    name: str
    description: str
    defaults: dict[str, Any]


def describe_models() -> list[ModelInfo]:
    """``(name, description, default arguments)`` for every registered model, sorted by name."""
    return [ModelInfo(e.name, e.help, _factory_kwargs(e.obj)) for e in MODELS]


def unwrap_model(model: nn.Module) -> nn.Module:
    """Peel DataParallel / DistributedDataParallel / AveragedModel / ``torch.compile`` wrappers."""
    while True:
        if "_orig_mod" in model._modules:  # torch.compile's OptimizedModule
            model = model._modules["_orig_mod"]  # type: ignore[assignment]
        elif isinstance(model, (DataParallel, DistributedDataParallel, AveragedModel)):
            model = model.module
        else:
            return model


def _spec_of(model_or_meta: Any) -> dict[str, Any] | None:
    if isinstance(model_or_meta, nn.Module):
        return getattr(unwrap_model(model_or_meta), "robfair_spec", None)
    if isinstance(model_or_meta, dict):
        return model_or_meta.get("spec", model_or_meta)
    return None


def check_model_data(model: Any, in_shape: Any, num_classes: int) -> None:
    """Raise ``ModelError`` when a model (or checkpoint meta) does not fit a dataset's image shape or
    class count. Models without ``robfair_spec`` (not built by ``create``) cannot be checked and pass."""
    spec = _spec_of(model)
    if not spec:
        return
    want, have = tuple(spec["in_shape"]), tuple(int(d) for d in in_shape)
    if want != have:
        raise ModelError(
            f"model expects {fmt_shape(want)} images, dataset has {fmt_shape(have)}; pick the matching --data or retrain"
        )
    if int(spec["num_classes"]) != int(num_classes):
        raise ModelError(
            f"model predicts {spec['num_classes']} classes, dataset has {num_classes}; pick the matching --data or retrain"
        )


def count_flops(model: nn.Module, in_shape: Any) -> int:
    """FLOPs of one forward pass on one image of ``in_shape`` (eval mode, no grad), as counted by
    ``torch.utils.flop_counter.FlopCounterMode``: 2 x multiply-accumulates of convolutions and matrix
    products; elementwise ops (BN, ReLU, pooling, normalization) are not counted."""
    in_shape = check_in_shape(in_shape)
    ref = next(model.parameters(), None)
    x = torch.zeros(1, *in_shape, device=ref.device if ref is not None else None)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(x)
    finally:
        model.train(was_training)
    return int(counter.get_total_flops())
