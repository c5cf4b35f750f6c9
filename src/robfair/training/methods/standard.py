"""Standard (natural) training: cross-entropy on clean inputs."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .method import METHODS, Method, TrainContext


@METHODS.register("standard", help="cross-entropy on clean inputs (ST)", aliases=("st", "natural"))
class Standard(Method):
    """Cross-entropy on clean inputs; per-class weights when a subclass supplies them."""

    name = "standard"
    sources = {"method": "empirical risk minimization (cross-entropy on clean inputs)"}

    def loss(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, g: torch.Tensor,
             ctx: TrainContext) -> torch.Tensor:
        logits = model(x)
        ctx.record(logits, y)
        return F.cross_entropy(logits, y, weight=self.class_weights())
