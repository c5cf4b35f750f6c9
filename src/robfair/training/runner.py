"""From a config to a finished run: load data, carve the validation split, build the model, train.

    from robfair.training import TrainConfig, train
    result = train(TrainConfig(data="digits", model="smallcnn", method="pgd-at", eps="0.1",
                               epochs=10, out="runs/pgd-at"))
    result.best_model, result.history[-1]["val"]["summary"]
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from torch import nn

from ..errors import ModelError
from ..utils import seed_everything
from .config import TrainConfig
from .trainer import RunResult, Trainer


def split_train_val(full: Any, cfg: TrainConfig) -> tuple[Any, Any]:
    """(train, val) carved from a training set with ``stratified_split(y, cfg.val_per_class, cfg.seed)``;
    val is None when ``val_per_class`` is 0. The test set is never involved."""
    from ..data import stratified_split

    if not cfg.val_per_class:
        return full, None
    tr, va = stratified_split(full.y, cfg.val_per_class, cfg.seed, classes=full.classes)
    return full.subset(tr), full.subset(va)


def load_init(model: nn.Module, path: str) -> None:
    """Copy the weights of checkpoint ``path`` into ``model`` (fine-tuning); the architecture, its
    arguments and the class count must match."""
    from ..models import load_checkpoint

    loaded, meta = load_checkpoint(path)
    want, have = getattr(model, "robfair_spec", {}), meta["spec"]
    diff = [k for k in ("name", "num_classes", "in_shape", "kwargs") if want.get(k) != have.get(k)]
    if diff:
        what = ", ".join(f"{k} {have.get(k)!r} (config: {want.get(k)!r})" for k in diff)
        raise ModelError(f"--init {path} does not fit the configured model: it has {what}; "
                         "pick a checkpoint of the same architecture and class count, or change model")
    model.load_state_dict(loaded.state_dict())


def build_model(cfg: TrainConfig, num_classes: int, in_shape: tuple[int, int, int]) -> nn.Module:
    """``robfair.models.create(cfg.model, ...)``, initialized from ``cfg.init`` when set."""
    from ..models import create

    model = create(cfg.model, num_classes, in_shape, **cfg.model_kwargs)
    if cfg.init:
        load_init(model, cfg.init)
    return model


def train(cfg: TrainConfig, *, callbacks: Sequence[Any] = (),
          final_audit: Callable[[nn.Module, Any], Any] | None = None,
          train_data: Any = None, test_data: Any = None) -> RunResult:
    """Run one training config end to end and return the :class:`RunResult`.

    ``train_data`` / ``test_data`` override loading ``cfg.data`` (splits "train" / "test"). The test
    split is only loaded when ``final_audit`` is given: ``final_audit(best_model, test)`` runs after
    training and its result lands in ``audit.json``."""
    from ..data import load_dataset

    seed_everything(cfg.seed)
    full = train_data if train_data is not None else load_dataset(cfg.data, "train")
    full.validate()
    tr, va = split_train_val(full, cfg)
    test = test_data
    if final_audit is not None and test is None:
        test = load_dataset(cfg.data, "test")
    model = build_model(cfg, full.num_classes, full.in_shape)
    return Trainer(model, tr, va, None, cfg, test=test, callbacks=callbacks, final_audit=final_audit).fit()
