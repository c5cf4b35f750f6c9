"""DAFA (Lee et al., ICLR 2024): distance-aware fair adversarial training.

The first ``warmup`` epochs (tau = 70 of 110; default 0.64 of the run) are plain TRADES (or PGD-AT). During the last warm-up epoch
the method accumulates, from the adversarial logits it computes anyway, the class similarity

    p_i(j) = mean softmax probability of class j over the adversarial training examples of class i

and at its end sets the class weights once (as the official code), W = 1 and for every i != j::

    if p_i(i) < p_j(j):  W_i += lam * p_i(j) * p_j(j)      (i is the harder class: it gains)
    else:                W_i -= lam * p_j(i) * p_i(i)      (zero-sum over pairs)

This is the paper's rule (``rule: paper``) and the official code's at its HEAD (``rule: official``,
rucy74/DAFA at c60ba83, whose ``calculate_class_weights`` was fixed to this form on 2024-09-02 in
74657cd). ``rule: official-2024-02`` is the code before that fix (4a7f87e), whose else-branch
subtracts ``lam * p_i(j) * p_j(j)``. Weights are clipped at ``min_weight`` >= 0 so that radii stay
valid. From then on class y trains with

    loss weight W_y on its cross-entropy,  radius eps_y = W_y * eps,  step_y = W_y * step

in **both** bases: TRADES ``mean(W_y CE(f(x), y)) + beta * mean(KL)`` and PGD-AT
``mean(W_y CE(f(x'), y))``. The step scales with the radius because robfair's attacks take a
step relative to each sample's eps (``rel_step``); the official PGD branch instead follows the
class-wise step with a second, global-eps step and projection, losing the class margin (a bug
that is not reproduced here).
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import Field

from ..losses import trades_kl, weighted_mean
from .method import METHODS, BasedOptions, Method, resolve_epoch, TrainContext

log = logging.getLogger(__name__)

#: the rules of the else-branch; "paper" and "official" (HEAD) are the same formula
RULES = ("paper", "official", "official-2024-02")


def dafa_weights(sim: torch.Tensor, lam: float = 1.0, rule: str = "paper") -> torch.Tensor:
    """DAFA's class weights (K,) from the class-similarity matrix ``sim[i, j] = p_i(j)`` (float64)."""
    sim = sim.double()
    d = sim.diagonal()
    off = ~torch.eye(len(d), dtype=torch.bool, device=sim.device)
    harder = (d[:, None] < d[None, :]) & off          # [i, j]: p_i(i) < p_j(j)
    easier = ~(d[:, None] < d[None, :]) & off
    gain = sim * d[None, :]                           # p_i(j) * p_j(j)
    if rule not in RULES:
        raise ValueError(f"unknown DAFA rule {rule!r}; choose one of {', '.join(RULES)}")
    cost = gain if rule == "official-2024-02" else sim.T * d[:, None]   # paper / HEAD: p_j(i) * p_i(i)
    return 1 + lam * (gain * harder).sum(1) - lam * (cost * easier).sum(1)


@METHODS.register("dafa", help="class weights, eps and step from adversarial class similarity after a "
                                "TRADES warm-up (Lee et al. 2024)")
class DAFA(Method):
    """DAFA on a TRADES or PGD-AT base; see the module docstring for the rule."""

    class Options(BasedOptions):  # base, beta
        lam: float = Field(1.0, ge=0, description="DAFA's lambda: the scale of the weight shifts")
        warmup: float = Field(0.64, ge=0, description="epochs before the weights are set (tau); < 1: a fraction "
                                                      "of the run (0.64: the official 70 of 110)")
        rule: Literal["paper", "official", "official-2024-02"] = Field(
            "paper", description="the else-branch: paper = official HEAD (c60ba83): -lam p_j(i) p_i(i); "
                                 "official-2024-02 (before the 2024-09 fix): -lam p_i(j) p_j(j)")
        min_weight: float = Field(0.0, ge=0, description="lower clip of the weights")

    name = "dafa"
    base_option = "base"
    sources = {"method": "Lee, Lee, Park, ICLR 2024 (DAFA), eq. 9 and Algorithm 1",
               "rule=paper": "the paper's weight update (zero-sum over class pairs)",
               "rule=official": "official code at HEAD rucy74/DAFA@c60ba8352d712c6108480a2ce7e7fa7abf30b48a (= paper)",
               "rule=official-2024-02": "rucy74/DAFA@4a7f87e7 before the 2024-09-02 fix 74657cd"}

    def __init__(self, options: Any = None, ctx: TrainContext | None = None):
        super().__init__(options, ctx)
        self.weights: torch.Tensor | None = None      # (K,) W, None during warm-up
        self.similarity: torch.Tensor | None = None   # (K, K) p_i(j)
        self._collect = False
        self._prob_sum: torch.Tensor | None = None
        self._count: torch.Tensor | None = None

    # ------------------------------------------------------------------ per-class quantities
    def class_weights(self) -> torch.Tensor | None:
        if self.weights is None:
            return None
        assert self.ctx is not None
        return self.weights.to(self.ctx.device)

    def class_eps(self) -> torch.Tensor | None:
        if self.weights is None:
            return None
        assert self.ctx is not None
        return (self.weights * self.ctx.eps).to(self.ctx.device)

    def warmup_epochs(self, epochs: int) -> int:
        return max(1, resolve_epoch(self.options.warmup, epochs))

    # ------------------------------------------------------------------ the batch loss
    def loss(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, g: torch.Tensor,
             ctx: TrainContext) -> torch.Tensor:
        x_adv = self.adversarial(model, x, y, ctx)  # eps_y = W_y eps
        logits = model(x) if self.options.base == "trades" else None
        logits_adv = model(x_adv)
        ctx.record(logits_adv, y)
        if self._collect:
            self._accumulate(logits_adv, y)
        w = self.class_weights()
        wy = w[y] if w is not None else None
        if logits is None:  # PGD-AT base: the class weights and margins stay (unlike the official code)
            return weighted_mean(F.cross_entropy(logits_adv, y, reduction="none"), wy, "mean")
        ce = F.cross_entropy(logits, y, reduction="none")
        loss_nat = weighted_mean(ce, wy, "mean")  # mean(W_y CE): divided by the batch size, as the code
        return loss_nat + self.options.beta * trades_kl(logits, logits_adv).mean()

    def _accumulate(self, logits_adv: torch.Tensor, y: torch.Tensor) -> None:
        probs = torch.softmax(logits_adv.detach().float(), dim=1).double()
        assert self._prob_sum is not None and self._count is not None
        self._prob_sum.index_add_(0, y, probs)
        self._count += torch.bincount(y, minlength=self._count.numel()).double()

    # ------------------------------------------------------------------ epoch hooks
    def on_train_start(self, ctx: TrainContext) -> None:
        if self.weights is None and self.warmup_epochs(ctx.epochs) >= ctx.epochs:
            log.warning("dafa: warm-up (%d epochs) covers the whole run of %d epochs; this trains plain %s",
                        self.warmup_epochs(ctx.epochs), ctx.epochs, self.options.base)
        attack = getattr(ctx.attack, "attack", ctx.attack)
        if getattr(attack, "step", None) is not None:
            log.warning("dafa: the training attack has an absolute step; the step no longer scales with W_y "
                        "(use rel_step instead of step in attack_options)")

    def on_epoch_start(self, ctx: TrainContext) -> None:
        self._collect = self.weights is None and ctx.epoch == self.warmup_epochs(ctx.epochs) - 1
        if self._collect:
            K = ctx.num_classes
            self._prob_sum = torch.zeros(K, K, dtype=torch.float64, device=ctx.device)
            self._count = torch.zeros(K, dtype=torch.float64, device=ctx.device)

    def on_epoch_end(self, ctx: TrainContext, val_report: Any | None) -> None:
        if not self._collect:
            return
        self._collect = False
        assert self._prob_sum is not None and self._count is not None
        stats = ctx.all_reduce(torch.cat([self._prob_sum.flatten(), self._count])).cpu()
        K = ctx.num_classes
        self.set_similarity(stats[:K * K].view(K, K), stats[K * K:])
        self._prob_sum = self._count = None

    def set_similarity(self, prob_sum: torch.Tensor, count: torch.Tensor) -> None:
        """Class similarity from summed adversarial probabilities per true class, then the weights.
        A class without training samples keeps weight 1 and takes no part in the pairs."""
        seen = count > 0
        sim = prob_sum.double() / count.double().clamp_min(1)[:, None]
        self.similarity = sim.float()
        w = torch.ones(len(count), dtype=torch.float64)
        idx = seen.nonzero().flatten()
        w[idx] = dafa_weights(sim[idx][:, idx], self.options.lam, self.options.rule)
        if bool((w < self.options.min_weight).any()):
            log.warning("dafa: weights %s clipped at min_weight %g", [round(float(v), 4) for v in w],
                        self.options.min_weight)
        self.weights = w.clamp_min(self.options.min_weight).float()

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {"weights": self.weights, "similarity": self.similarity}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.weights, self.similarity = state["weights"], state["similarity"]

    def epoch_state(self) -> dict[str, Any]:
        out = super().epoch_state()  # class_weights (W) and class_eps once set
        if self.similarity is not None:
            out["class_similarity"] = [[float(v) for v in row] for row in self.similarity]
        return out
