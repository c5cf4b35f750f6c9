"""TRADES (Zhang et al. 2019): CE(f(x), y) + beta * KL(f(x) || f(x')), with x' maximizing the KL."""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field

from ..losses import trades_kl, trades_loss, weighted_mean
from .method import METHODS, Method, TradesOptions, TrainContext

__all__ = ["TRADES", "weighted_mean"]


@METHODS.register("trades", help="CE(f(x),y) + beta*KL(f(x)||f(x')) (Zhang et al. 2019)")
class TRADES(Method):
    """TRADES with per-class weights on both terms, the form FRL builds on::

        ratio:  sum w_nat[y] CE(f(x), y) / sum w_nat[y] + beta * sum w_bndy[y] KL_i / sum w_bndy[y]

    with KL_i = KL(softmax f(x_i) || softmax f(x'_i)) summed over classes, and x' from the
    ``trades-kl`` inner maximization at each sample's radius ``sample_eps(y)``. Without weights this
    is the official TRADES loss (its KL is summed over classes and averaged over the batch).
    Subclasses set the weights through ``class_weights`` (natural term) and ``boundary_weights``;
    ``normalization`` picks how weighted terms are normalized (``robfair.training.losses.trades_loss``).
    A TRADES-like method is a subclass overriding those hooks (see ``frl.py``)."""

    class Options(TradesOptions):
        normalization: Literal["ratio", "mean-k", "joint"] = Field(
            "ratio", description="ratio: sum w CE/sum w + beta sum w KL/sum w; mean-k: mean(K w CE) + beta "
                                 "mean(K w KL); joint: sum(w_n CE + beta w_b KL)/sum(w_n + w_b)")

    name = "trades"
    sources = {"method": "Zhang et al., ICML 2019, eq. 5 (official code yaodongyu/TRADES: KL summed over classes, "
                         "batch mean)",
               "normalization=ratio": "TRADES; FRL at hannxu123/fair_robust@a80547d (HEAD)",
               "normalization=joint": "FRL's first code, hannxu123/fair_robust@18d1177",
               "normalization=mean-k": "robfair: unbiased for FRL's sum_i w_i R_i"}
    default_attack = "trades-kl"

    def boundary_weights(self) -> torch.Tensor | None:
        """(K,) weight per class on the KL term, or None for uniform."""
        return None

    def loss(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, g: torch.Tensor,
             ctx: TrainContext) -> torch.Tensor:
        x_adv = self.adversarial(model, x, y, ctx)
        logits = model(x)
        ctx.record(logits, y)
        w_nat, w_bndy = self.class_weights(), self.boundary_weights()
        ce = F.cross_entropy(logits, y, reduction="none")
        kl = trades_kl(logits, model(x_adv))
        return trades_loss(ce, kl, self.options.beta, w_nat=None if w_nat is None else w_nat[y],
                           w_bndy=None if w_bndy is None else w_bndy[y],
                           normalization=self.term_normalization(), num_classes=ctx.num_classes)

    def term_normalization(self) -> str:
        """How the weighted terms are normalized for this batch (``normalization``)."""
        return self.options.normalization

    def epoch_state(self):
        out = super().epoch_state()
        wb = self.boundary_weights()
        if wb is not None:
            out["boundary_weights"] = [float(v) for v in wb.detach().cpu()]
        return out
