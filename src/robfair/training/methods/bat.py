"""BAT (Sun, Xu, Yao, Liang, Wu, Liang, Liu, Liu; AAAI 2023): balance adversarial training.

Two observations of the paper, as the official code (silvercherry/Improving-Robust-Fairness-via-
Balance-Adversarial-Training at 9bcee67, ``train.py`` and ``train_mode/``) implements them:

- **source-class fairness** (attack difficulty): classes differ in how hard their samples are to
  attack, so every sample is attacked only as far as its own decision boundary. One TRADES-KL ascent
  (the configured ``trades-kl`` attack's steps, step and start), stopped per sample:

      last clean  x_lc = the last iterate still classified correctly (the final iterate if none is wrong;
                         the start if it is already wrong)
      first adv   x_fa = the iterate at which the sample is found misclassified for the (tau + 1)-th time
                         (tau = 1, FAT's rule; the final iterate if that never happens)

  A class whose samples cross the boundary early gets small perturbations, a robust class large ones.
- **target-class fairness** (uniformity): the predictions at those boundary points are pulled toward
  the uniform distribution u, so no wrong class is preferred when a class is attacked.

Loss of a batch (official ``BAT_loss``; KL summed over classes, averaged over the batch)::

    CE(f(x_lc), y) + beta * KL(p(x) || p(x_fa)) + gamma * (KL(p(x_lc) || u) + KL(p(x_fa) || u))

with beta = 6 and gamma = 1 (the code adds the two uniformity terms unweighted). The official code
runs two separate early-stopped attacks (with two 0.001-noise starts); robfair follows one trajectory
and reads both points off it (the same points up to the start noise, at half the attack cost).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from pydantic import Field

from ...attacks.attack import as_eps, ascent_step, check_inputs, eval_mode, noise, project
from ...attacks.trades import TradesKL
from ...errors import ConfigError
from ..losses import per_class_sums, trades_kl
from .method import METHODS, Method, TrainContext

__all__ = ["BAT", "boundary_points"]


def boundary_points(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, eps: Any, *, steps: int,
                    rel_step: float = 0.25, step: Any = None, noise_std: float = 0.001, norm: str = "linf",
                    tau: int = 1, generator: torch.Generator | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """BAT's early-stopped TRADES-KL ascent (input gradients only, model in eval mode, flags restored).

    Returns ``(x_lc, x_fa, lc_step, fa_step)``: the last-clean and first-adversarial points of every
    sample and the ascent step at which each was taken (``steps`` when the search ran out)."""
    x, y = check_inputs(x, y)
    e = as_eps(eps, x)
    st = e * rel_step if step is None else as_eps(step, x, what="step")
    n = x.shape[0]
    with eval_mode(model), torch.enable_grad():
        with torch.no_grad():
            p_clean = F.softmax(model(x).float(), dim=1)
        xa = project(x + noise_std * noise("normal", x.shape, x, generator), x, e, norm)
        prev = xa.detach().clone()
        lc, fa = xa.detach().clone(), xa.detach().clone()
        lc_done = torch.zeros(n, dtype=torch.bool, device=x.device)
        fa_done = torch.zeros_like(lc_done)
        lc_step = torch.full((n,), steps, dtype=torch.long, device=x.device)
        fa_step = lc_step.clone()
        control = torch.full((n,), int(tau), dtype=torch.long, device=x.device)
        for k in range(steps):
            xa.requires_grad_(True)
            logits = model(xa).float()
            wrong = logits.argmax(1) != y
            new_lc = wrong & ~lc_done
            lc[new_lc], lc_step[new_lc] = prev[new_lc], k
            lc_done |= new_lc
            hit = wrong & ~fa_done
            rec = hit & (control == 0)
            fa[rec], fa_step[rec] = xa.detach()[rec], k
            fa_done |= rec
            control = control - (hit & ~rec).long()
            if bool((lc_done & fa_done).all()):
                break
            kl = F.kl_div(F.log_softmax(logits, dim=1), p_clean, reduction="sum")
            (grad,) = torch.autograd.grad(kl, xa)
            prev = xa.detach()
            xa = project(ascent_step(prev, grad, st, norm), x, e, norm)
        xa = xa.detach()
        lc[~lc_done], fa[~fa_done] = xa[~lc_done], xa[~fa_done]
    return lc, fa, lc_step, fa_step


@METHODS.register("bat", help="boundary-stopped TRADES attack per sample + a uniformity term on the boundary "
                               "predictions (Sun et al. 2023)")
class BAT(Method):
    """BAT; see the module docstring for the rule."""

    class Options(Method.Options):
        beta: float = Field(6.0, ge=0, description="weight of KL(p(x) || p(x_fa)) (official 6)")
        gamma: float = Field(1.0, ge=0, description="weight of the uniformity terms KL(p || u) (official 1)")
        tau: int = Field(1, ge=0, description="first-adversarial point: misclassified tau + 1 times (official 1)")

    name = "bat"
    default_attack = "trades-kl"
    sources = {"method": "Sun et al., AAAI 2023 (Improving Robust Fairness via Balance Adversarial Training)",
               "official": "silvercherry/Improving-Robust-Fairness-via-Balance-Adversarial-Training@"
                           "9bcee67aedeea64cd5c3790e88d292f7dafe8a8f train.py, train_mode/stop_to_*.py"}

    def __init__(self, options: Any = None, ctx: TrainContext | None = None):
        super().__init__(options, ctx)
        self._inner: Any = None
        self._steps_sum: torch.Tensor | None = None

    def on_train_start(self, ctx: TrainContext) -> None:
        self._inner = self._search_attack(ctx)

    @staticmethod
    def _search_attack(ctx: TrainContext) -> Any:
        inner = getattr(ctx.attack, "attack", ctx.attack)
        if not isinstance(inner, TradesKL):
            raise ConfigError("bat stops a TRADES-KL ascent at each sample's boundary; set attack: trades-kl "
                              "(attack_options steps / rel_step / step set its steps and step)")
        return inner

    def on_epoch_start(self, ctx: TrainContext) -> None:
        self._steps_sum = None

    def loss(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, g: torch.Tensor,
             ctx: TrainContext) -> torch.Tensor:
        inner = self._inner if self._inner is not None else self._search_attack(ctx)
        scale = getattr(ctx.attack, "scale", None)  # the trainer's eps warm-up
        eps = self.sample_eps(y)
        eps = eps if scale is None else eps * scale()
        lc, fa, lc_step, fa_step = boundary_points(
            ctx.unwrap(model), x, y, eps, steps=inner.steps, rel_step=inner.rel_step, step=inner.step,
            noise_std=inner.noise_std, norm=inner.norm, tau=self.options.tau, generator=ctx.generator)
        k = ctx.num_classes
        sums = torch.cat([per_class_sums(lc_step.double(), y, k), per_class_sums(fa_step.double(), y, k),
                          per_class_sums(torch.ones_like(lc_step, dtype=torch.float64), y, k)])
        self._steps_sum = sums if self._steps_sum is None else self._steps_sum + sums
        logits = model(x)
        ctx.record(logits, y)
        z_lc, z_fa = model(lc), model(fa)
        uniform = torch.zeros_like(z_lc, dtype=torch.float32)
        o = self.options
        loss = F.cross_entropy(z_lc, y) + o.beta * trades_kl(logits, z_fa).mean()
        if o.gamma:
            loss = loss + o.gamma * (trades_kl(z_lc, uniform) + trades_kl(z_fa, uniform)).mean()
        return loss

    def epoch_state(self) -> dict[str, Any]:
        """Per class: the mean ascent step of the last-clean and first-adversarial points (this rank's
        training batches): how far each class is attacked."""
        out = super().epoch_state()
        if self._steps_sum is not None:
            k = self._steps_sum.numel() // 3
            lc, fa, n = self._steps_sum[:k], self._steps_sum[k:2 * k], self._steps_sum[2 * k:]
            out["last_clean_step"] = [None if c == 0 else float(a / c) for a, c in zip(lc.tolist(), n.tolist())]
            out["first_adv_step"] = [None if c == 0 else float(a / c) for a, c in zip(fa.tolist(), n.tolist())]
        return out
