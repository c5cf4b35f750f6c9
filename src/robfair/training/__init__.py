"""Training: one loop (``Trainer``) and pluggable methods (``METHODS``: standard, pgd-at, trades, ...).

    from robfair.training import TrainConfig, train
    result = train(TrainConfig(data="digits", method="trades", eps="0.1", epochs=10, out="runs/trades"))

``Trainer(model, train, val, method, cfg).fit()`` gives the same from objects you built yourself.
"""

from __future__ import annotations

import importlib
from typing import Any

from .config import TrainConfig, load_config

# Everything else is imported on first use: the CLI reads TrainConfig's defaults for its help
# without importing torch (``robfair --help`` stays fast).
_LAZY = {
    **{name: "methods" for name in ("METHODS", "Method", "TrainContext", "build_method")},
    **{name: "runner" for name in ("audit_hook", "build_model", "split_train_val", "train")},
    **{name: "trainer" for name in ("Callback", "ProgressCallback", "RunResult", "Trainer")},
    "random_crop_flip": "robfair.data.augment",  # the trainer's augmentation, owned by robfair.data
    **{name: "selection" for name in ("Selection", "select_best", "selection_score", "val_summary")},
    **{name: "optim" for name in ("make_optimizer", "make_scheduler", "eps_warmup_scale")},
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module = _LAZY[name]
        value = getattr(importlib.import_module(module if "." in module else f".{module}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "TrainConfig", "load_config", "METHODS", "Method", "TrainContext", "build_method", "Trainer", "RunResult",
    "Callback", "ProgressCallback", "train", "audit_hook", "build_model", "split_train_val", "select_best", "selection_score",
    "val_summary", "random_crop_flip", "Selection", "make_optimizer", "make_scheduler", "eps_warmup_scale",
]
