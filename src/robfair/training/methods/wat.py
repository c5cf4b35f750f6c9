"""WAT (Li & Liu, AAAI 2023): worst-class adversarial training with exponential (Hedge) class weights.

After every epoch each class k pays a validation cost ``c_k``; one extra "average" pseudo-class
pays the cost of the whole validation set. The weights are Hedge's on the cumulative costs,
scaled as in the official code::

    C <- C + c                         (K + 1 entries; the last is the average pseudo-class)
    w = K * softmax(eta * C)           (eta = 0.1)

and the next epoch trains TRADES with the per-class weights plus the pseudo-class's weight on the
whole batch: ``loss = mean_i (w[y_i] + w_avg) * (CE_i + beta * KL_i)`` (the official form;
``normalize: true`` divides by ``sum_i (w[y_i] + w_avg)`` instead of the batch size).

The cost (``cost``):

- ``trades-surrogate`` (default; the official code, boqili/WAT at 62d1184): after validation the
  method re-attacks the validation split with the training attack (TRADES-KL at the global eps, model
  in eval mode) and pays each class its *surrogate* ``mean CE + beta * mean KL`` over the class's
  validation samples; the pseudo-class pays the same over the whole split. (The official code divides
  the class sums by ``batches * batch_size / K``, which equals the class mean for a balanced split
  with full batches; robfair uses each class's exact count.)
- ``trades-01``: TRADES' 0-1 risk that the surrogate bounds, ``std_err_k + beta * bndy_err_k`` under
  the trainer's validation attack (no extra attack pass);
- ``rob-err``: the class's robust error under the validation attack.

Before the first validation all weights are ``K / (K + 1)`` (Hedge at C = 0; the official code starts
every weight at 1).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field

from ...errors import ConfigError
from ..losses import per_class_sums, trades_kl
from .method import METHODS, Method, TradesOptions, TrainContext


def report_costs(report: Any, cost: str, beta: float) -> tuple[np.ndarray, float]:
    """Per-class costs (K,) and the whole set's cost of a validation ``GroupReport``; a class with no
    validation samples gets the whole set's cost (neutral for Hedge)."""
    if cost not in ("trades-01", "rob-err"):
        raise ConfigError(f"wat cost {cost!r} is not computed from a validation report; use trades-01 or rob-err, "
                          "or let the method re-attack the validation split (trades-surrogate)")
    frame, overall = report.by_class, report.overall

    def of(src: Any) -> Any:
        if cost == "rob-err":
            return src["rob_err"]
        return src["std_err"] + beta * src["bndy_err"]

    per_class = np.asarray(of(frame), dtype=float)
    avg = float(of(overall))
    return np.where(np.isfinite(per_class), per_class, avg), avg


@METHODS.register("wat", help="TRADES with Hedge class weights on cumulative validation risk + an average "
                               "pseudo-class (Li & Liu 2023)")
class WAT(Method):
    """WAT; see the module docstring for the rule and the reconstructed choices."""

    class Options(TradesOptions):
        eta: float = Field(0.1, gt=0, description="Hedge learning rate on the cumulative costs")
        cost: Literal["trades-surrogate", "trades-01", "rob-err"] = Field(
            "trades-surrogate", description="per-class validation cost: trades-surrogate (official: re-attack "
                                            "with TRADES-KL, mean CE + beta mean KL), trades-01 or rob-err")
        average_class: bool = Field(True, description="add the 'average' pseudo-class (whole-batch term)")
        normalize: bool = Field(False, description="divide by the summed sample weights instead of the batch size")

    name = "wat"
    sources = {"method": "Li & Liu, AAAI 2023 (WAT)",
               "cost=trades-surrogate": "official code boqili/WAT@62d1184f9b88909c9e782ab8234128324235ac84 validate()",
               "cost=trades-01": "robfair: the 0-1 risk the surrogate bounds, from the validation report",
               "cost=rob-err": "robfair: validation robust error"}
    default_attack = "trades-kl"

    def __init__(self, options: Any = None, ctx: TrainContext | None = None):
        super().__init__(options, ctx)
        self.cum_cost: torch.Tensor | None = None   # (K [+1],) float64
        self.last_cost: torch.Tensor | None = None

    # ------------------------------------------------------------------ weights
    def _num_classes(self) -> int:
        assert self.ctx is not None, "the trainer sets method.ctx before training"
        return self.ctx.num_classes

    def hedge_weights(self) -> torch.Tensor:
        """``K * softmax(eta * C)`` over the K classes (and the pseudo-class, last), float64 on the CPU."""
        K = self._num_classes()
        n = K + 1 if self.options.average_class else K
        c = self.cum_cost if self.cum_cost is not None else torch.zeros(n, dtype=torch.float64)
        return K * torch.softmax(self.options.eta * c, dim=0)

    def class_weights(self) -> torch.Tensor:
        """Each class's weight on its samples' TRADES loss: ``w_k`` plus the pseudo-class's ``w_avg``."""
        w = self.hedge_weights()
        K = self._num_classes()
        s = w[:K] + (w[K] if self.options.average_class else 0.0)
        assert self.ctx is not None
        return s.float().to(self.ctx.device)

    # ------------------------------------------------------------------ the batch loss
    def loss(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, g: torch.Tensor,
             ctx: TrainContext) -> torch.Tensor:
        logits, logits_adv = self.clean_and_adversarial(model, x, y, ctx)
        ce = F.cross_entropy(logits, y, reduction="none")
        kl = trades_kl(logits, logits_adv)
        s = self.class_weights().to(y.device)[y]
        per_sample = s * (ce + self.options.beta * kl)
        return per_sample.sum() / s.sum() if self.options.normalize else per_sample.mean()

    # ------------------------------------------------------------------ epoch hooks
    def on_train_start(self, ctx: TrainContext) -> None:
        if not ctx.cfg.val_per_class:
            raise ConfigError("wat weighs classes by their validation risk but val_per_class is 0; set "
                              "val_per_class (e.g. 0.1)")

    def on_epoch_end(self, ctx: TrainContext, val_report: Any | None) -> None:
        if val_report is None:
            raise ConfigError("wat needs a validation report each epoch; pass a validation set")
        if self.options.cost == "trades-surrogate":
            self.add_costs(*self.surrogate_costs(ctx))
        else:
            self.update(val_report)

    @torch.no_grad()
    def _forward(self, model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        return model(x)

    def surrogate_costs(self, ctx: TrainContext) -> tuple[np.ndarray, float]:
        """The official cost: per-class ``mean CE + beta * mean KL`` on the validation split re-attacked
        with the training attack (eval mode), and the same over the whole split (all ranks summed)."""
        if ctx.val_batches is None or ctx.model is None or ctx.attack is None:
            raise ConfigError("wat cost 'trades-surrogate' re-attacks the validation split, but the training loop "
                              "offers none; train with robfair's Trainer and a validation split, or set "
                              "cost: trades-01")
        K, beta = ctx.num_classes, self.options.beta
        model = ctx.model
        flags = [(m, m.training) for m in model.modules()]
        model.eval()
        gen = torch.Generator(device=ctx.device)
        gen.manual_seed(int(ctx.cfg.seed) * 1_000_003 + 7919 * (ctx.epoch + 1) + ctx.rank)
        sums = torch.zeros(2 * K, dtype=torch.float64, device=ctx.device)
        try:
            for x, y, _ in ctx.val_batches(ctx.cfg.val_batch_size or ctx.cfg.batch_size):
                x_adv = ctx.attack(model, x, y, ctx.eps, generator=gen)
                logits, logits_adv = self._forward(model, x), self._forward(model, x_adv)
                cost = F.cross_entropy(logits.float(), y, reduction="none") + beta * trades_kl(logits, logits_adv)
                sums[:K] += per_class_sums(cost, y, K)
                sums[K:] += per_class_sums(torch.ones_like(cost), y, K)
        finally:
            for m, flag in flags:
                m.training = flag
        sums = ctx.all_reduce(sums).cpu()
        total, count = sums[:K].numpy(), sums[K:].numpy()
        avg = float(total.sum() / max(count.sum(), 1.0))
        with np.errstate(invalid="ignore", divide="ignore"):
            per_class = np.where(count > 0, total / np.maximum(count, 1.0), avg)
        return per_class, avg

    def update(self, report: Any) -> None:
        """Add one validation report's costs to the cumulative costs (one Hedge round)."""
        self.add_costs(*report_costs(report, self.options.cost, self.options.beta))

    def add_costs(self, per_class: np.ndarray, avg: float) -> None:
        """One Hedge round from per-class costs (K,) and the whole set's cost."""
        c = torch.as_tensor(per_class, dtype=torch.float64)
        if self.options.average_class:
            c = torch.cat([c, torch.tensor([avg], dtype=torch.float64)])
        self.last_cost = c
        self.cum_cost = c.clone() if self.cum_cost is None else self.cum_cost + c

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {"cum_cost": self.cum_cost, "last_cost": self.last_cost}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.cum_cost, self.last_cost = state["cum_cost"], state["last_cost"]

    def epoch_state(self) -> dict[str, Any]:
        out = super().epoch_state()
        out["hedge_weights"] = [float(v) for v in self.hedge_weights()]  # last entry: the average pseudo-class
        if self.last_cost is not None:
            out["val_cost"] = [float(v) for v in self.last_cost]
            out["cum_cost"] = [float(v) for v in self.cum_cost]  # type: ignore[union-attr]
        return out
