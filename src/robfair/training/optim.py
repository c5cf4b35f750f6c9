"""The optimizer, the learning-rate schedule and the eps warm-up of a training run, from its config.

    optimizer = make_optimizer(model.parameters(), cfg)
    scheduler = make_scheduler(optimizer, cfg, steps_per_epoch)     # stepped once per iteration
    eps_scale = eps_warmup_scale(step, cfg, steps_per_epoch)        # factor on every training radius

The schedule is stepped **per iteration**: milestones and warm-up given in epochs are converted to
steps, so warm-up is smooth and any batch count works. Warm-up ramps linearly from ``lr / 100``.
"""

from __future__ import annotations

from typing import Iterable

import torch
from torch.optim import lr_scheduler as S

from .config import TrainConfig


def make_optimizer(params: Iterable[torch.nn.Parameter], cfg: TrainConfig) -> torch.optim.Optimizer:
    """SGD (momentum, weight decay, optional Nesterov) or Adam (``betas=(momentum, 0.999)``)."""
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay,
                               nesterov=cfg.nesterov and cfg.momentum > 0)
    return torch.optim.Adam(params, lr=cfg.lr, betas=(cfg.momentum, 0.999), weight_decay=cfg.weight_decay)


def make_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainConfig, steps_per_epoch: int) -> S.LRScheduler:
    """``cfg.schedule`` (piecewise at ``cfg.resolved_milestones()`` by ``cfg.gamma``, cosine to 0, or
    constant) over ``cfg.epochs * steps_per_epoch`` steps, after ``cfg.warmup_epochs`` of linear warm-up."""
    spe = steps_per_epoch
    total = cfg.epochs * spe
    warm = int(round(cfg.warmup_epochs * spe))
    if cfg.schedule == "piecewise":
        ms = sorted({max(1, int(round(m * spe)) - warm) for m in cfg.resolved_milestones()})
        main: S.LRScheduler = S.MultiStepLR(optimizer, ms, gamma=cfg.gamma)
    elif cfg.schedule == "cosine":
        main = S.CosineAnnealingLR(optimizer, T_max=max(1, total - warm))
    else:
        main = S.ConstantLR(optimizer, factor=1.0, total_iters=0)
    if warm <= 0:
        return main
    ramp = S.LinearLR(optimizer, start_factor=0.01, end_factor=1.0, total_iters=warm)
    return S.SequentialLR(optimizer, [ramp, main], milestones=[warm])


def eps_warmup_scale(step: int, cfg: TrainConfig, steps_per_epoch: int) -> float:
    """The factor on every training radius at optimizer step ``step`` (0-based): a linear ramp
    ``(step + 1) / (eps_warmup * steps_per_epoch)`` up to 1 (1 throughout without ``eps_warmup``)."""
    warm = cfg.eps_warmup * steps_per_epoch
    return 1.0 if warm <= 0 else min(1.0, (step + 1) / warm)
