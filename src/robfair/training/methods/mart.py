"""MART (Wang et al., ICLR 2020): misclassification-aware adversarial training.

With x' from the training attack (PGD-10 on cross-entropy) and p = softmax::

    BCE_i = -log p_y(x'_i) - log(1 - max_{k != y} p_k(x'_i))
    loss  = mean_i BCE_i + beta * mean_i KL(p(x_i) || p(x'_i)) * (1 - p_y(x_i))        (beta = 6)

as in the official code (its 1.0001 / 1e-12 guards included; the weight ``1 - p_y(x)`` is not
detached). With ``class_weights`` from a subclass both means become ``sum w[y] . / sum w[y]``.
The loss itself is ``robfair.training.losses.mart_loss``.
"""

from __future__ import annotations

import torch
from pydantic import Field

from ..losses import mart_loss
from .method import METHODS, Method, TrainContext

__all__ = ["MART", "mart_loss"]


@METHODS.register("mart", help="boosted CE on x' + KL weighted by 1 - p_y(x) (Wang et al. 2020)")
class MART(Method):
    """MART; each sample attacked at ``sample_eps(y)``. Records the adversarial logits (training
    accuracy is robust accuracy)."""

    class Options(Method.Options):
        beta: float = Field(6.0, ge=0, description="weight of the misclassification-aware KL term")

    name = "mart"
    sources = {"method": "Wang et al., ICLR 2020, eq. 9 with the official code's numerical guards"}
    default_attack = "pgd10"

    def loss(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, g: torch.Tensor,
             ctx: TrainContext) -> torch.Tensor:
        logits, logits_adv = self.clean_and_adversarial(model, x, y, ctx)
        w = self.class_weights()
        return mart_loss(logits, logits_adv, y, self.options.beta, None if w is None else w.to(y.device)[y])
