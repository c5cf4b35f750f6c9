"""Training: one loop (``Trainer``) and pluggable methods (``METHODS``: standard, pgd-at, trades, ...).

    from robfair.training import TrainConfig, train
    result = train(TrainConfig(data="digits", method="trades", eps="0.1", epochs=10, out="runs/trades"))

``Trainer(model, train, val, method, cfg).fit()`` gives the same from objects you built yourself.
"""

from .config import TrainConfig, load_config
from .methods import METHODS, Method, TrainContext, build_method
from .runner import build_model, split_train_val, train
from .trainer import Callback, RunResult, Trainer, random_crop_flip, select_best, selection_score, val_summary

__all__ = [
    "TrainConfig", "load_config", "METHODS", "Method", "TrainContext", "build_method", "Trainer", "RunResult",
    "Callback", "train", "build_model", "split_train_val", "select_best", "selection_score", "val_summary",
    "random_crop_flip",
]
