"""PGD adversarial training (Madry et al.): cross-entropy on PGD adversarial examples."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .method import METHODS, Method, TrainContext


@METHODS.register("pgd-at", help="cross-entropy on PGD adversarial examples (Madry)", aliases=("at", "madry"))
class PGDAT(Method):
    """CE(f(x'), y) with x' from the training attack (default PGD-10, L-inf, step eps/4).

    Each sample is attacked at its own radius ``sample_eps(y)`` (per-class eps when a subclass sets
    ``class_eps``); with ``class_weights`` the loss is sum_i w[y_i] CE_i / sum_i w[y_i]."""

    name = "pgd-at"
    sources = {"method": "Madry et al., ICLR 2018: min E max_{||d|| <= eps} CE(f(x + d), y), PGD inner maximization"}
    default_attack = "pgd10"

    def loss(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, g: torch.Tensor,
             ctx: TrainContext) -> torch.Tensor:
        x_adv = self.adversarial(model, x, y, ctx)
        logits = model(x_adv)
        ctx.record(logits, y)
        return F.cross_entropy(logits, y, weight=self.class_weights())
