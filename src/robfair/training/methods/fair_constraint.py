"""Fairness-constrained training (Tran et al., spec section 3) and its adversarial mitigation.

``fair-constraint`` minimizes, on clean inputs::

    CE(f(x), y)  +  sum_g lambda_g * | S_g - S |

where ``S_g`` is the mean of a per-sample fairness surrogate over the batch's samples of group g and
``S`` its mean over the whole batch (groups: the dataset's protected groups ``g``, else the classes):

==================== ======================================== ==================================
``fairness``         surrogate per sample                      samples
==================== ======================================== ==================================
accuracy-parity      soft error 1 - softmax(f(x))_y            all (``surrogate: ce`` for CE)
loss-parity          cross-entropy CE(f(x), y)                 all
equal-opportunity    soft error on the positive class          ``y == positive`` (binary labels)
==================== ======================================== ==================================

The soft error is the expected 0-1 error of the model's randomized prediction: a differentiable
stand-in for the accuracy that accuracy parity compares. The multipliers are either fixed
(``lam``, ``dual_step: 0``) or updated by dual ascent after every epoch (``dual_step: s > 0``)::

    lambda_g <- max(0, lambda_g + s * (V_g - alpha))

with ``V_g`` the group's fairness violation measured on the validation split (``|acc_g - acc|``,
``|TPR_g - TPR|``; robust accuracy for ``fair-adversarial``) or, for loss parity or without a
validation split, on the epoch's training batches (``|CE_g - CE|``, ``|acc_g - acc|``).

``fair-adversarial`` applies the same constraint to adversarial examples (the mitigation of Tran
et al.): ``inner: pgd`` trains CE on PGD examples, ``inner: trades`` the TRADES loss, and the
penalty uses the surrogate on the adversarial logits; its dual step uses robust accuracy.

Every epoch's multipliers and violations (per group and the maximum) land in ``metrics.jsonl``
under ``method``.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field

from ...errors import ConfigError
from ..losses import trades_kl
from .method import METHODS, Method, TrainContext

NOTIONS = ("accuracy-parity", "loss-parity", "equal-opportunity")


@METHODS.register("fair-constraint", help="CE + sum_g lambda_g |L_g - L| (Tran: accuracy/loss parity, equal "
                  "opportunity; fixed lambda or dual ascent)")
class FairConstraint(Method):
    """Fairness-constrained training on clean inputs (see the module docstring)."""

    class Options(Method.Options):
        fairness: Literal["accuracy-parity", "loss-parity", "equal-opportunity"] = Field(
            "accuracy-parity", description="the fairness notion constrained")
        lam: float = Field(1.0, ge=0, description="penalty weight lambda (the starting multipliers with dual ascent)")
        dual_step: float = Field(0.0, ge=0, description="dual ascent step s per epoch; 0: fixed lambda")
        alpha: float = Field(0.0, ge=0, description="violation tolerated by the dual step")
        surrogate: Literal["soft-error", "ce"] = Field(
            "soft-error", description="accuracy-parity / equal-opportunity surrogate: soft error or CE")
        positive: int = Field(1, ge=0, description="equal-opportunity: the positive class id")

    name = "fair-constraint"
    sources = {"method": "Tran, Fioretto, Van Hentenryck 2022: Lagrangian fairness constraints (dual ascent)"}
    default_attack = None
    #: validation rate whose parity the dual step uses
    val_rate = "clean_acc"

    def __init__(self, options: Any = None, ctx: TrainContext | None = None) -> None:
        self._ctx: TrainContext | None = None
        super().__init__(options, ctx)
        self.lam = torch.zeros(0, dtype=torch.float64)
        self.group_names: list[str] | None = None
        self.violation: dict[str, Any] | None = None
        self._reset_stats()

    # ------------------------------------------------------------------ task checks
    @property
    def ctx(self) -> TrainContext | None:
        return self._ctx

    @ctx.setter
    def ctx(self, value: TrainContext | None) -> None:
        if value is not None:
            self.check_task(value.num_classes)
        self._ctx = value

    def check_task(self, num_classes: int) -> None:
        """ConfigError when the notion does not fit the task (called when the trainer attaches)."""
        o = self.options
        if o.fairness == "equal-opportunity":
            if num_classes != 2:
                raise ConfigError(f"fairness 'equal-opportunity' needs binary labels but the task has {num_classes} "
                                  "classes; use fairness accuracy-parity or loss-parity (--opt fairness=...), or a binary task "
                                  "(e.g. utkface task=gender, celeba label=Smiling)")
            if o.positive >= num_classes:
                raise ConfigError(f"positive class {o.positive} is not a class of this binary task; pass positive 0 or 1")

    # ------------------------------------------------------------------ the loss
    def _grow(self, num_groups: int, device: torch.device) -> None:
        """Size the multipliers (float64 on the CPU) and the epoch statistics (on ``device``) for
        ``num_groups`` groups."""
        if num_groups > self.lam.numel():
            extra = torch.full((num_groups - self.lam.numel(),), float(self.options.lam), dtype=torch.float64)
            self.lam = torch.cat([self.lam.cpu(), extra])
        acc = torch.float32 if torch.device(device).type == "mps" else torch.float64  # MPS has no float64
        for k, s in self._stats.items():
            if s.numel() < self.lam.numel():
                s = torch.cat([s, torch.zeros(self.lam.numel() - s.numel(), dtype=s.dtype, device=s.device)])
            self._stats[k] = s.to(device=device, dtype=acc)

    def _reset_stats(self) -> None:
        dev = self._stats["n"].device if getattr(self, "_stats", None) else torch.device("cpu")
        dt = self._stats["n"].dtype if getattr(self, "_stats", None) else torch.float64
        self._stats = {k: torch.zeros(self.lam.numel(), dtype=dt, device=dev)
                       for k in ("n", "loss", "correct", "n_pos", "correct_pos")}

    def surrogate(self, logits: torch.Tensor, y: torch.Tensor, ce: torch.Tensor) -> torch.Tensor:
        """Per-sample value whose group means are compared."""
        if self.options.fairness == "loss-parity" or self.options.surrogate == "ce":
            return ce
        return 1.0 - F.softmax(logits.float(), dim=1).gather(1, y[:, None]).squeeze(1)

    def penalty(self, logits: torch.Tensor, y: torch.Tensor, g: torch.Tensor, ce: torch.Tensor) -> torch.Tensor:
        """sum_g lambda_g |S_g - S| over the groups present in the batch (and in the constrained subset)."""
        G = int(g.max()) + 1 if g.numel() else 0
        self._grow(G, logits.device)
        self._accumulate(logits, y, g, ce)
        G = self.lam.numel()
        s = self.surrogate(logits, y, ce)
        keep = (y == self.options.positive) if self.options.fairness == "equal-opportunity" else torch.ones_like(y, dtype=torch.bool)
        w = keep.to(s.dtype)
        n_g = torch.zeros(G, dtype=s.dtype, device=s.device).index_add_(0, g, w)
        sum_g = torch.zeros(G, dtype=s.dtype, device=s.device).index_add_(0, g, s * w)
        total = w.sum()
        overall = (s * w).sum() / total.clamp_min(1)
        mean_g = sum_g / n_g.clamp_min(1)
        gap = torch.where(n_g > 0, (mean_g - overall).abs(), torch.zeros_like(mean_g))
        return (self.lam.to(device=gap.device, dtype=gap.dtype) * gap).sum()

    @torch.no_grad()
    def _accumulate(self, logits: torch.Tensor, y: torch.Tensor, g: torch.Tensor, ce: torch.Tensor) -> None:
        st = self._stats
        dt = st["n"].dtype
        one = torch.ones_like(ce, dtype=dt)
        right = (logits.argmax(1) == y).to(dt)
        st["n"].index_add_(0, g, one)
        st["loss"].index_add_(0, g, ce.detach().to(dt))
        st["correct"].index_add_(0, g, right)
        pos = (y == self.options.positive).to(dt)
        st["n_pos"].index_add_(0, g, pos)
        st["correct_pos"].index_add_(0, g, right * pos)

    def loss(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, g: torch.Tensor,
             ctx: TrainContext) -> torch.Tensor:
        logits = model(x)
        ctx.record(logits, y)
        ce = F.cross_entropy(logits, y, reduction="none")
        return ce.mean() + self.penalty(logits, y, g, ce)

    # ------------------------------------------------------------------ epoch hooks
    def on_epoch_start(self, ctx: TrainContext) -> None:
        self._reset_stats()

    def _train_violation(self) -> tuple[np.ndarray, str]:
        st = {k: v.detach().cpu().numpy() for k, v in self._stats.items()}
        o = self.options
        with np.errstate(invalid="ignore", divide="ignore"):
            if o.fairness == "loss-parity":
                per, total = st["loss"] / st["n"], st["loss"].sum() / max(st["n"].sum(), 1)
                what = "train CE"
            elif o.fairness == "equal-opportunity":
                per, total = st["correct_pos"] / st["n_pos"], st["correct_pos"].sum() / max(st["n_pos"].sum(), 1)
                what = "train TPR"
            else:
                per, total = st["correct"] / st["n"], st["correct"].sum() / max(st["n"].sum(), 1)
                what = "train accuracy"
        return np.abs(per - total), what

    def _val_violation(self, report: Any) -> tuple[np.ndarray, str] | None:
        o = self.options
        if report is None or o.fairness == "loss-parity":
            return None
        robust = self.val_rate == "rob_acc"
        c = report.counts
        if o.fairness == "equal-opportunity":
            k = o.positive
            hits = (c.robust if robust else c.clean)[:, k].astype(float)
            n = c.n[:, k].astype(float)
            what = f"val {'robust' if robust else 'clean'} TPR"
        else:
            n = c.n.sum(1).astype(float)
            hits = (c.robust if robust else c.clean).sum(1).astype(float)
            what = f"val {'robust' if robust else 'clean'} accuracy"
        with np.errstate(invalid="ignore", divide="ignore"):
            per = hits / n
        total = hits.sum() / max(n.sum(), 1)
        return np.abs(per - total), what

    def on_epoch_end(self, ctx: TrainContext, val_report: Any | None) -> None:
        if val_report is not None:
            self.group_names = list(val_report.group_names)
            self._grow(len(self.group_names), self._stats["n"].device)
        measured = self._val_violation(val_report) or self._train_violation()
        per, what = measured
        per = np.pad(per, (0, max(0, self.lam.numel() - per.size)), constant_values=np.nan)[: self.lam.numel()]
        o = self.options
        if o.dual_step > 0:
            # groups without samples (NaN) keep their multiplier
            step = torch.as_tensor(np.where(np.isnan(per), 0.0, per - o.alpha), dtype=torch.float64)
            self.lam = (self.lam + o.dual_step * step).clamp_min(0)
        names = self._names()
        finite = per[np.isfinite(per)]
        self.violation = {
            "measure": f"|{what}_g - {what}|",
            "per_group": {n: (float(v) if math.isfinite(v) else None) for n, v in zip(names, per)},
            "max": float(finite.max()) if finite.size else None,
        }
        if val_report is not None:
            agg = val_report.aggregates()
            self.violation["val_accuracy_parity"] = {"clean": agg["clean_acc"]["parity"], "robust": agg["rob_acc"]["parity"]}

    def _names(self) -> list[str]:
        G = self.lam.numel()
        names = list(self.group_names or [])
        return names[:G] + [str(i) for i in range(len(names), G)]

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {"lam": self.lam.cpu().tolist(), "group_names": self.group_names, "violation": self.violation}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.lam = torch.tensor(state.get("lam", []), dtype=torch.float64)
        self.group_names = state.get("group_names")
        self.violation = state.get("violation")
        self._reset_stats()

    def epoch_state(self) -> dict[str, Any]:
        out = super().epoch_state()
        names = self._names()
        out["fairness"] = self.options.fairness
        out["lambda"] = {n: float(v) for n, v in zip(names, self.lam.cpu().tolist())}
        if self.violation is not None:
            out["violation"] = self.violation
        st = {k: v.detach().cpu().numpy() for k, v in self._stats.items()}
        with np.errstate(invalid="ignore", divide="ignore"):
            loss = st["loss"] / st["n"]
        out["train_group_loss"] = {n: (float(v) if math.isfinite(v) else None) for n, v in zip(names, loss)}
        return out


@METHODS.register("fair-adversarial", help="the fairness constraint on adversarial examples (PGD or TRADES inner "
                  "max; Tran's mitigation)")
class FairAdversarial(FairConstraint):
    """Fair adversarial training: the constraint of ``fair-constraint`` on adversarial examples.

    ``inner: pgd``: CE(f(x'), y) + sum_g lambda_g |S_g(x') - S(x')| with x' from the training attack
    (default PGD-10). ``inner: trades``: CE(f(x), y) + beta KL(f(x) || f(x')) + the same penalty, x'
    from the TRADES KL attack. The dual step uses robust accuracy (or robust TPR) on validation."""

    class Options(FairConstraint.Options):
        beta: float = Field(6.0, ge=0, description="TRADES weight of the KL term (inner: trades)")
        inner: Literal["pgd", "trades"] = Field("pgd", description="inner maximization: PGD (CE) or TRADES (KL)")

    name = "fair-adversarial"
    sources = {"method": "Tran et al. 2022: the fairness constraint on adversarial examples"}
    base_option = "inner"
    val_rate = "rob_acc"

    def loss(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, g: torch.Tensor,
             ctx: TrainContext) -> torch.Tensor:
        x_adv = self.adversarial(model, x, y, ctx)
        if self.options.inner == "pgd":
            logits_adv = model(x_adv)
            ctx.record(logits_adv, y)
            ce_adv = F.cross_entropy(logits_adv, y, reduction="none")
            return ce_adv.mean() + self.penalty(logits_adv, y, g, ce_adv)
        logits = model(x)
        ctx.record(logits, y)
        logits_adv = model(x_adv)
        kl = trades_kl(logits, logits_adv)
        ce_adv = F.cross_entropy(logits_adv, y, reduction="none")
        return F.cross_entropy(logits, y) + self.options.beta * kl.mean() + self.penalty(logits_adv, y, g, ce_adv)
