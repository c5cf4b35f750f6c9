"""TRADES inner maximization (Zhang et al. 2019): maximize KL(f(x) || f(x')) over each sample's ball.

Differences from the reference code, on purpose:

- the step is ``rel_step * eps_i`` **per sample** (the FRL code overwrites it with ``max_i(eps_i)/4``
  across the batch, so small-margin samples take oversized steps);
- the start ``x + 0.001 * N(0, I)`` is drawn with the caller's generator and projected into the ball
  and [0, 1] (a sample with ``eps_i = 0`` stays exactly ``x_i``);
- the loss is the per-sample KL summed over the batch; ``batchmean`` only rescales it, which sign
  (L-inf) and normalized (L2) steps ignore, and the sum keeps every sample's gradient independent of
  the batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import AttackError
from .attack import NORMS, Attack, as_eps, ascent_step, check_choice, noise, project
from .names import ATTACKS


@ATTACKS.register("trades-kl", help="TRADES inner maximization of KL(f(x) || f(x')), 10 steps of eps/4",
                  forms=("trades-kl", "trades-kl-l2"))
class TradesKL(Attack):
    """TRADES KL attack: ``steps`` ascent steps on KL(softmax f(x) || softmax f(x')), projected.

    Args:
        steps: ascent steps (TRADES: 10).
        norm: ``"linf"`` (TRADES) or ``"l2"``.
        step: absolute step (float or (N,) tensor); ``None`` uses ``rel_step * eps_i`` per sample.
        rel_step: 0.25 gives TRADES' 2/255 at 8/255.
        noise_std: standard deviation of the Gaussian start (TRADES: 0.001).
        precision: ``"fp32"``, ``"bf16"`` or ``"fp16"`` autocast for the forward passes.

    There is no success criterion (the attack is label-free: ``y`` is ignored), so ``early_exit`` has
    no effect and the last iterate is returned. Clean probabilities are computed once, without grad.
    """

    family = "trades-kl"

    def __init__(self, steps: int = 10, *, norm: str = "linf", step: float | torch.Tensor | None = None,
                 rel_step: float = 0.25, noise_std: float = 0.001, precision: str = "fp32",
                 name: str | None = None) -> None:
        super().__init__(precision=precision)
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise AttackError(f"TRADES steps must be an integer >= 0, got {steps!r}; use e.g. steps=10")
        if not rel_step > 0:
            raise AttackError(f"rel_step must be > 0, got {rel_step!r}; use e.g. 0.25 (2/255 at 8/255)")
        if not noise_std >= 0:
            raise AttackError(f"noise_std must be >= 0, got {noise_std!r}; TRADES uses 0.001")
        self.steps = steps
        self.norm = check_choice(norm, NORMS, "norm")
        self.step = step
        self.rel_step = float(rel_step)
        self.noise_std = float(noise_std)
        self.name = name or ("trades-kl" if self.norm == "linf" else "trades-kl-l2")

    def perturb(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: torch.Tensor, *,
                generator: torch.Generator | None, early_exit: bool) -> torch.Tensor:
        step = eps * self.rel_step if self.step is None else as_eps(self.step, x, what="step")
        with torch.no_grad():
            p_clean = F.softmax(self.logits(model, x), dim=1)
        xa = project(x + self.noise_std * noise("normal", x.shape, x, generator), x, eps, self.norm)
        for _ in range(self.steps):
            xa.requires_grad_(True)
            log_q = F.log_softmax(self.logits(model, xa), dim=1)
            kl = F.kl_div(log_q, p_clean, reduction="sum")  # sum_i KL(p_i || q_i); xlogy handles p = 0
            (grad,) = torch.autograd.grad(kl, xa)
            xa = project(ascent_step(xa.detach(), grad, step, self.norm), x, eps, self.norm)
        return xa
