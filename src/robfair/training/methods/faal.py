"""FAAL (Zhang, Zhang, Mu, Huang, Ruan; CVPR 2024): fairness-aware adversarial learning.

Adversarial training as min-max-max: besides the worst perturbation per sample, the loss is taken
under the worst-case class distribution q in a KL ball around the uniform prior u (distributionally
robust optimization over classes). Per batch, as the official code (TrustAI/FAAL at b20ee9d,
``ft_prn.py`` / ``FAAL.py``)::

    x'    = the training attack (PGD-10 on CE for base pgd-at, TRADES-KL for base trades)
    L_k   = mean over the batch's class-k samples of the softmax margin
            max_{j != y} p_j(x') - p_y(x')                          (``class_loss: margin``)
    q     = argmax_q  sum_k n_k L_k q_k   s.t.  q in the simplex, KL(u || q) <= rho     (rho = 0.5)
    loss  = (K / N) sum_i q[y_i] l_i,   l_i = CE(f(x'_i), y_i)                    (pgd-at)
                                        l_i = CE(f(x_i), y_i) + beta KL_i       (trades)

with ``n_k`` the class's count in the batch (the official objective sums ``q[y_i] L[y_i]`` over the
samples) and q detached. The official code solves the convex problem with cvxpy (ECOS / MOSEK / SCS);
here :func:`kl_ball_weights` solves its optimality conditions exactly: ``q_k = lam u_k / (nu - c_k)``
with ``nu > max c`` set by a bisection so that the KL constraint is tight (``q = u`` when all ``c``
are equal or ``rho = 0``). FAAL fine-tunes a robust model for two epochs in the paper (``init``; lr
0.01 in the official scripts).
"""

from __future__ import annotations

import logging
import math
from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import Field

from ..losses import trades_kl, weighted_mean
from .method import METHODS, BasedOptions, Method, TrainContext

log = logging.getLogger(__name__)

__all__ = ["FAAL", "kl_ball_weights", "softmax_margin"]


def kl_ball_weights(c: torch.Tensor, rho: float, prior: torch.Tensor | None = None) -> torch.Tensor:
    """``argmax_q c.q`` over the simplex with ``KL(prior || q) <= rho`` (prior: uniform), float64.

    KKT: ``q_k = lam * prior_k / (nu - c_k)`` for some ``nu > max_k c_k``; ``sum q = 1`` fixes ``lam``
    and, when the constraint binds, ``KL(prior || q(nu)) = rho`` fixes ``nu`` (KL falls monotonically
    from infinity to 0 as ``nu`` grows), found by bisection on ``log(nu - max c)``."""
    c = c.detach().double().cpu().flatten()
    k = c.numel()
    u = torch.full((k,), 1.0 / k, dtype=torch.float64) if prior is None else prior.detach().double().cpu().flatten()
    spread = float(c.max() - c.min())
    if rho <= 0 or k == 1 or not spread > 0:
        return u.clone()

    def q_of(t: float) -> torch.Tensor:
        r = u / (float(c.max()) + t - c)
        return r / r.sum()

    def kl(q: torch.Tensor) -> float:
        m = u > 0
        return float((u[m] * (u[m] / q[m]).log()).sum())

    lo, hi = math.log(spread * 1e-12), math.log(spread * 1e12)
    for _ in range(200):  # KL(t) decreases in t: find KL = rho
        mid = 0.5 * (lo + hi)
        if kl(q_of(math.exp(mid))) > rho:
            lo = mid
        else:
            hi = mid
    return q_of(math.exp(hi))  # the feasible side of the bracket


def softmax_margin(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(N,) ``max_{j != y} p_j - p_y`` of the softmax probabilities (the official ``cw`` loss)."""
    p = torch.softmax(logits.float(), dim=1)
    p_y = p.gather(1, y[:, None]).squeeze(1)
    other = p.masked_fill(F.one_hot(y, p.shape[1]).bool(), -1.0).amax(dim=1)
    return other - p_y


@METHODS.register("faal", help="class weights from the worst-case class distribution in a KL ball (DRO), a short "
                                "fine-tune over PGD-AT or TRADES (Zhang et al. 2024)")
class FAAL(Method):
    """FAAL; see the module docstring for the rule."""

    class Options(BasedOptions):  # beta; base defaults to pgd-at here
        base: Literal["pgd-at", "trades"] = Field("pgd-at", description="the per-sample loss FAAL reweights")
        rho: float = Field(0.5, ge=0, description="radius of the KL ball KL(u || q) <= rho (official --scale 0.5)")
        class_loss: Literal["margin", "ce"] = Field(
            "margin", description="per-class loss the worst case is taken over: softmax margin on x' (official) or "
                                  "the adversarial CE")
        objective: Literal["official", "mean"] = Field(
            "official", description="official: sum_k n_k L_k q_k (the code sums over samples); mean: sum_k L_k q_k")

    name = "faal"
    base_option = "base"
    sources = {"method": "Zhang, Zhang, Mu, Huang, Ruan, CVPR 2024 (Towards Fairness-Aware Adversarial Learning)",
               "official": "TrustAI/FAAL@b20ee9dbe60c5ab700eaab3d41faa10e5295d39a ft_prn.py, FAAL.py (cvxpy DRO weights)",
               "objective=mean": "robfair: the class means without the batch counts"}

    def __init__(self, options: Any = None, ctx: TrainContext | None = None):
        super().__init__(options, ctx)
        self.last_weights: torch.Tensor | None = None
        self._sum_w: torch.Tensor | None = None
        self._batches = 0

    def on_train_start(self, ctx: TrainContext) -> None:
        if not ctx.cfg.init and not ctx.cfg.model_file:  # a model file is its own starting point
            log.warning("faal fine-tunes a robust model (two epochs in the paper) but the config names no init "
                        "checkpoint; set init (--init) to a PGD-AT or TRADES model")

    def on_epoch_start(self, ctx: TrainContext) -> None:
        self._sum_w, self._batches = None, 0

    def class_distribution(self, logits_adv: torch.Tensor, y: torch.Tensor, num_classes: int) -> torch.Tensor:
        """The batch's worst-case class distribution q (K,), float64 on the CPU."""
        o = self.options
        per = softmax_margin(logits_adv, y) if o.class_loss == "margin" else \
            F.cross_entropy(logits_adv.float(), y, reduction="none")
        k = num_classes
        n = torch.bincount(y, minlength=k).double().to(per.device)
        sums = torch.zeros(k, dtype=torch.float64, device=per.device).index_add_(0, y, per.detach().double())
        mean = torch.where(n > 0, sums / n.clamp_min(1), torch.full_like(sums, -1.0))  # absent: -1 (official)
        c = mean * n if o.objective == "official" else mean
        return kl_ball_weights(c, o.rho)

    def loss(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, g: torch.Tensor,
             ctx: TrainContext) -> torch.Tensor:
        x_adv = self.adversarial(model, x, y, ctx)
        logits_adv = model(x_adv)
        ctx.record(logits_adv, y)
        k = ctx.num_classes
        q = self.class_distribution(logits_adv, y, k)
        self.last_weights = q
        self._sum_w = q.clone() if self._sum_w is None else self._sum_w + q
        self._batches += 1
        if self.options.base == "pgd-at":
            per = F.cross_entropy(logits_adv, y, reduction="none")
        else:
            logits = model(x)
            per = F.cross_entropy(logits, y, reduction="none") + self.options.beta * trades_kl(logits, logits_adv)
        w = (k * q).to(device=per.device, dtype=per.dtype)[y]
        return weighted_mean(per, w, "mean")  # (K / N) sum_i q[y_i] l_i

    def state_dict(self) -> dict[str, Any]:
        return {"last_weights": self.last_weights}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.last_weights = state.get("last_weights")

    def epoch_state(self) -> dict[str, Any]:
        out = super().epoch_state()
        if self._sum_w is not None and self._batches:
            out["class_distribution_mean"] = [float(v) for v in self._sum_w / self._batches]
        if self.last_weights is not None:
            out["class_distribution_last_batch"] = [float(v) for v in self.last_weights]
        return out
