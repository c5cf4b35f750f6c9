"""TRADES (Zhang et al. 2019): CE(f(x), y) + beta * KL(f(x) || f(x')), with x' maximizing the KL."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field

from .base import METHODS, Method, TrainContext


def weighted_mean(values: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """sum_i w_i v_i / sum_i w_i (the plain mean when ``weights`` is None)."""
    if weights is None:
        return values.mean()
    return (weights * values).sum() / weights.sum()


@METHODS.register("trades", help="CE(f(x),y) + beta*KL(f(x)||f(x')) (Zhang et al. 2019)")
class TRADES(Method):
    """TRADES with per-class weights on both terms, the form FRL builds on::

        loss = sum w_nat[y] CE(f(x), y) / sum w_nat[y] + beta * sum w_bndy[y] KL_i / sum w_bndy[y]

    with KL_i = KL(softmax f(x_i) || softmax f(x'_i)) summed over classes, and x' from the
    ``trades-kl`` inner maximization at each sample's radius ``sample_eps(y)``. Without weights this
    is the official TRADES loss (its KL is summed over classes and averaged over the batch).
    Subclasses set the weights through ``class_weights`` (natural term) and ``boundary_weights``."""

    class Options(Method.Options):
        beta: float = Field(6.0, ge=0, description="weight of the KL (boundary) term; FRL uses 1 to 6")

    name = "trades"
    default_attack = "trades-kl"

    def boundary_weights(self) -> torch.Tensor | None:
        """(K,) weight per class on the KL term, or None for uniform."""
        return None

    def loss(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, g: torch.Tensor,
             ctx: TrainContext) -> torch.Tensor:
        assert ctx.attack is not None, "trades needs a training attack"
        x_adv = ctx.attack(model, x, y, self.sample_eps(y), generator=ctx.generator)
        logits = model(x)
        ctx.record(logits, y)
        w_nat, w_bndy = self.class_weights(), self.boundary_weights()
        ce = F.cross_entropy(logits, y, reduction="none")
        logits_adv = model(x_adv)
        # KL(p_nat || p_adv) per sample, in float32 even under autocast
        log_p_nat = F.log_softmax(logits.float(), dim=1)
        log_p_adv = F.log_softmax(logits_adv.float(), dim=1)
        kl = (log_p_nat.exp() * (log_p_nat - log_p_adv)).sum(dim=1)
        loss_nat = weighted_mean(ce, None if w_nat is None else w_nat[y])
        return loss_nat + self.options.beta * weighted_mean(kl, None if w_bndy is None else w_bndy[y])

    def epoch_state(self):
        out = super().epoch_state()
        wb = self.boundary_weights()
        if wb is not None:
            out["boundary_weights"] = [float(v) for v in wb.detach().cpu()]
        return out
