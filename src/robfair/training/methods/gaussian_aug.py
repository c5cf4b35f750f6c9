"""Gaussian noise augmentation (Cohen, Rosenfeld & Kolter 2019): train the base classifier of a
randomized-smoothing model on x + N(0, sigma^2 I), so ``robfair certify --sigma`` has something to certify.

As the official ``code/train.py`` of locuslab/smoothing (commit e748e701ff8a): every training input
gets fresh noise of standard deviation ``sigma`` in [0, 1] pixel units, before the model's own
normalization, and is not clipped to [0, 1] (the smoothed classifier sees unclipped noise too).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field

from ...attacks.attack import noise
from .method import METHODS, Method, TrainContext


@METHODS.register("gaussian-aug", help="cross-entropy on x + N(0, sigma^2) noise, for randomized smoothing (Cohen)",
                  aliases=("gaussian", "noise-aug"))
class GaussianAug(Method):
    """CE(f(x + sigma * e), y), e ~ N(0, I) drawn from the trainer's seeded generator each batch.
    ``sigma`` should match the certification's ``--sigma``; per-class weights apply as in ``standard``."""

    class Options(Method.Options):
        sigma: float = Field(0.25, gt=0, description="noise standard deviation (pixels in [0, 1])")

    name = "gaussian-aug"
    default_attack = None
    default_select = "last"  # the official code keeps the last epoch
    sources = {"method": "Cohen, Rosenfeld & Kolter, ICML 2019 (randomized smoothing); noise as the official "
                         "locuslab/smoothing code/train.py @ e748e701ff8a (--noise_sd)"}

    def loss(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, g: torch.Tensor,
             ctx: TrainContext) -> torch.Tensor:
        x_noisy = x + self.options.sigma * noise("normal", tuple(x.shape), x, ctx.generator)
        logits = model(x_noisy)
        ctx.record(logits, y)
        return F.cross_entropy(logits, y, weight=self.class_weights())
