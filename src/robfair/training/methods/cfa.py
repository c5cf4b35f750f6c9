"""CFA (Wei et al., CVPR 2023): class-wise calibrated fair adversarial training.

Three parts, each switchable (``method_options``):

- **CCM** (class-wise calibrated margin): class k is attacked at ``eps_k = (lambda1 + t_k) * eps``,
  where ``t_k`` is last epoch's robust accuracy of class k on its *training* adversarial examples
  (the logits this method records); ``lambda1`` defaults to 0.3 on the TRADES base, 0.5 on PGD-AT.
- **CCR** (class-wise calibrated regularization, TRADES base only): ``beta_k = (lambda2 + t_k) * beta``.
  ``ccr_form="paper"`` (eq. 8): ``mean((CE + beta_y KL) / (1 + beta_y))`` -- the denominator shifts
  hard classes (small ``beta_y``) toward the natural loss; ``"official"``: the official code's
  ``mean((1 - b_y) CE + b_y KL)`` with ``b = beta_k / (1 + beta_k)`` (PKU-ML/CFA at 071f333, the same
  value as eq. 8 written as the code does: per-sample terms divided by the batch size, then summed);
  ``"unnormalized"``: ``mean CE + mean beta_y KL`` (robfair's earlier, mislabelled "paper" form).
- **FAWA** (fairness-aware weight average): after each epoch from ``fawa_from`` on, the trained
  model's validation report gates an EMA of the weights: ``avg <- decay * avg + (1 - decay) * model``
  only when its worst class robust accuracy is at least ``fawa_threshold`` (the first accepted epoch
  copies the model). Once the average exists it is what the trainer validates, selects,
  saves as ``best.pt`` and audits (``Method.eval_model``); before that, the trained model is.

The training attack: ``attack_model_mode: train`` attacks with batch-norm batch statistics (the
official PGD-AT base, whose attack runs inside ``model.train()``; the TRADES attack of the official code
switches to eval); ``attack_step`` (e.g. 2/255) uses one absolute step for every class radius, as the
official code, instead of ``rel_step * eps_k``.

Calibration starts at ``calibrate_from`` (the official code's ``--begin``, 10 of 200 epochs: default 0.05): epochs with
a smaller index use the global eps and beta. Epoch options below 1 are fractions of the run
(``fawa_from: 0.5`` starts the average half-way), so short runs scale.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import Field, field_validator, model_validator
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from ...errors import ConfigError
from ...utils import parse_eps
from ..losses import trades_kl, weighted_mean
from .method import METHODS, BasedOptions, Method, resolve_epoch, TrainContext

__all__ = ["CFA", "resolve_epoch", "worst_class_rob_acc", "cfa_trades_loss"]


def cfa_trades_loss(ce: torch.Tensor, kl: torch.Tensor, beta: torch.Tensor | float, form: str) -> torch.Tensor:
    """CFA's calibrated TRADES loss from per-sample CE, KL and beta_y (see the module docstring)."""
    if form == "unnormalized":
        return ce.mean() + (beta * kl).mean()
    if form == "paper":
        return ((ce + beta * kl) / (1 + beta)).mean()
    b = beta / (1 + beta)
    return weighted_mean((1 - b) * ce + b * kl, None)


def worst_class_rob_acc(report: Any) -> float:
    """The lowest per-class robust accuracy of a validation ``GroupReport`` (empty classes skipped)."""
    frame = report.by_class
    vals = frame.loc[frame["n"] > 0, "rob_acc"].to_numpy(dtype=float)
    return float(vals.min()) if vals.size else math.nan


@METHODS.register("cfa", help="class-wise calibrated eps/beta from train robust acc + fairness-gated weight "
                               "average (Wei et al. 2023)")
class CFA(Method):
    """CFA on a TRADES or PGD-AT base; see the module docstring for the rules."""

    class Options(BasedOptions):  # base, beta (TRADES's, before calibration)
        lambda1: float | None = Field(None, ge=0, description="CCM offset; None: 0.3 (trades) or 0.5 (pgd-at)")
        lambda2: float = Field(0.5, ge=0, description="CCR offset")
        ccm: bool = Field(True, description="class-wise eps from train robust accuracy")
        ccr: bool = Field(True, description="class-wise beta from train robust accuracy (trades base)")
        ccr_form: Literal["paper", "official", "unnormalized"] = Field(
            "paper", description="paper: eq. 8 (CE + beta_y KL)/(1 + beta_y); official: (1-b)CE + b KL, "
                                 "b = beta_y/(1+beta_y) (same value); unnormalized: CE + beta_y KL")
        attack_model_mode: Literal["eval", "train"] = Field(
            "eval", description="attack in eval mode, or in train mode (BN batch statistics; official PGD-AT base)")
        attack_step: float | None = Field(
            None, gt=0, description="one absolute attack step for every class radius (official: 2/255); "
                                    "None: rel_step * eps_k")
        calibrate_from: float = Field(0.05, ge=0, description="first epoch (0-based) calibrated; < 1: a fraction of "
                                                              "the run (0.05: the official --begin 10 of 200)")
        fawa: bool = Field(True, description="fairness-aware weight average, used for best.pt and the audit")
        fawa_decay: float = Field(0.85, ge=0, lt=1, description="FAWA's moving-average decay: average <- decay * average + (1 - decay) * weights")
        fawa_threshold: float = Field(0.2, ge=0, le=1, description="min class val robust acc to average an epoch")
        fawa_from: float = Field(0.25, ge=0, description="first epoch (0-based) that may enter the average; "
                                                         "< 1: a fraction of the run (0.25: 50 of 200)")

        @field_validator("attack_step", mode="before")
        @classmethod
        def _parse_step(cls, v: Any) -> Any:
            return None if v is None else parse_eps(v, "attack_step")

        @model_validator(mode="after")
        def _resolve_lambda1(self) -> "CFA.Options":
            if self.lambda1 is None:
                self.lambda1 = 0.3 if self.base == "trades" else 0.5
            return self

    name = "cfa"
    base_option = "base"
    sources = {"method": "Wei, Wang, Guo, Wang, CVPR 2023 (CFA)",
               "ccr_form=paper": "eq. 8: (CE + beta_y KL) / (1 + beta_y)",
               "ccr_form=official": "PKU-ML/CFA@071f3334a59d144cedbe65b18019c9757bece6f2 attack.py: (1-b) CE + b KL",
               "ccr_form=unnormalized": "robfair's earlier form (CE + beta_y KL), not the paper's",
               "attack_model_mode=train": "PKU-ML/CFA@071f333 train.py: the PGD-AT base attacks in train mode",
               "attack_step": "PKU-ML/CFA@071f333: a fixed 2/255 step for every class radius"}

    def __init__(self, options: Any = None, ctx: TrainContext | None = None):
        super().__init__(options, ctx)
        self.eps_scale: torch.Tensor | None = None    # (K,) lambda1 + t_k, None: global eps
        self.class_beta: torch.Tensor | None = None   # (K,) beta_k, None: global beta
        self.train_rob_acc: torch.Tensor | None = None
        self.fawa_gate: float | None = None           # last epoch's worst class val robust acc
        self.fawa_updated = False
        self._avg: Any = None                         # torch.optim.swa_utils.AveragedModel
        self._avg_state: dict[str, Any] | None = None  # restored state, applied once the model is known
        self._model: torch.nn.Module | None = None
        self._attack: Any = None                      # the fixed-step attack (attack_step), else ctx.attack

    # ------------------------------------------------------------------ per-class quantities
    def class_eps(self) -> torch.Tensor | None:
        if not self.options.ccm or self.eps_scale is None:
            return None
        assert self.ctx is not None
        return (self.eps_scale * self.ctx.eps).to(self.ctx.device)

    def betas(self, y: torch.Tensor) -> torch.Tensor | float:
        """Each sample's beta: ``class_beta[y]`` once calibrated (and ``ccr``), else the global beta."""
        if self.options.ccr and self.class_beta is not None:
            return self.class_beta.to(y.device)[y]
        return self.options.beta

    # ------------------------------------------------------------------ the batch loss
    def loss(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, g: torch.Tensor,
             ctx: TrainContext) -> torch.Tensor:
        assert ctx.attack is not None, "cfa needs a training attack"
        self._model = ctx.unwrap(model)  # the weights FAWA averages (never the DDP wrapper)
        attack = self._attack or ctx.attack
        kw = {"model_mode": "train"} if self.options.attack_model_mode == "train" else {}
        x_adv = attack(model, x, y, self.sample_eps(y), generator=ctx.generator, **kw)
        if self.options.base == "pgd-at":
            logits_adv = model(x_adv)
            ctx.record(logits_adv, y)  # t_k is robust accuracy on the training adversarial examples
            return F.cross_entropy(logits_adv, y)
        logits = model(x)
        logits_adv = model(x_adv)
        ctx.record(logits_adv, y)
        ce = F.cross_entropy(logits, y, reduction="none")
        return cfa_trades_loss(ce, trades_kl(logits, logits_adv), self.betas(y), self.options.ccr_form)

    # ------------------------------------------------------------------ epoch hooks
    def on_train_start(self, ctx: TrainContext) -> None:
        if self.options.attack_step is not None and self._attack is None:
            opts = {**ctx.cfg.attack_options, "step": self.options.attack_step}
            opts.pop("rel_step", None)
            self._attack = ctx.build_attack(str(ctx.cfg.attack), opts)
        if self.options.fawa and not ctx.cfg.val_per_class:
            raise ConfigError("cfa's FAWA gates on the validation split but val_per_class is 0; set val_per_class "
                              "(e.g. 0.1) or method_options.fawa: false")

    def on_epoch_end(self, ctx: TrainContext, val_report: Any | None) -> None:
        self.update_calibration(ctx.train_class_acc, next_epoch=ctx.epoch + 1)
        self.fawa_updated = False
        if not self.options.fawa:
            return
        if val_report is None:
            raise ConfigError("cfa's FAWA needs a validation report; pass a validation set or set "
                              "method_options.fawa: false")
        self.fawa_gate = worst_class_rob_acc(val_report)
        start = resolve_epoch(self.options.fawa_from, ctx.epochs)
        if ctx.epoch >= start and self.fawa_gate >= self.options.fawa_threshold and self._model is not None:
            self._average(self._model)

    def update_calibration(self, train_acc: torch.Tensor | None, next_epoch: int) -> None:
        """CCM/CCR for epoch ``next_epoch`` from the per-class train robust accuracy just measured.
        A class without training samples this epoch keeps the uncalibrated eps and beta."""
        if train_acc is None:
            return
        t = train_acc.detach().double().cpu()
        self.train_rob_acc = t
        assert self.ctx is not None
        if next_epoch < resolve_epoch(self.options.calibrate_from, self.ctx.epochs):
            return
        seen = ~torch.isnan(t)
        o = self.options
        self.eps_scale = torch.where(seen, o.lambda1 + t, torch.ones_like(t)).float()
        self.class_beta = torch.where(seen, (o.lambda2 + t) * o.beta, torch.full_like(t, o.beta)).float()

    # ------------------------------------------------------------------ FAWA
    def _average(self, model: torch.nn.Module) -> None:
        self._materialize(model)
        if self._avg is None:
            self._avg = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(self.options.fawa_decay),
                                      use_buffers=True)
        self._avg.update_parameters(model)  # the first call copies the model
        self.fawa_updated = True

    def _materialize(self, model: torch.nn.Module | None) -> None:
        """Rebuild the average from a resumed state once a model of the right architecture is known."""
        if self._avg_state is None or model is None:
            return
        self._avg = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(self.options.fawa_decay),
                                  use_buffers=True)
        self._avg.load_state_dict(self._avg_state)
        self._avg_state = None

    @property
    def fawa_updates(self) -> int:
        """How many epochs entered the average so far."""
        if self._avg is not None:
            return int(self._avg.n_averaged)
        return int(self._avg_state["n_averaged"]) if self._avg_state is not None else 0

    def eval_model(self) -> torch.nn.Module | None:
        if not self.options.fawa:
            return None
        self._materialize(self._model)
        return None if self._avg is None else self._avg.module

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        avg = self._avg.state_dict() if self._avg is not None else self._avg_state
        return {"eps_scale": self.eps_scale, "class_beta": self.class_beta, "train_rob_acc": self.train_rob_acc,
                "fawa_gate": self.fawa_gate, "fawa_updated": self.fawa_updated,
                "fawa": None if avg is None else dict(avg)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.eps_scale, self.class_beta = state["eps_scale"], state["class_beta"]
        self.train_rob_acc = state["train_rob_acc"]
        self.fawa_gate, self.fawa_updated = state["fawa_gate"], state["fawa_updated"]
        self._avg, self._avg_state = None, state["fawa"]
        self._materialize(self._model)

    def epoch_state(self) -> dict[str, Any]:
        out = super().epoch_state()
        if self.class_beta is not None and self.options.ccr and self.options.base == "trades":
            out["class_beta"] = [float(v) for v in self.class_beta]
        if self.train_rob_acc is not None:
            out["train_rob_acc"] = [None if math.isnan(v) else float(v) for v in self.train_rob_acc]
        if self.options.fawa:
            out["fawa"] = {"gate_worst_rob_acc": self.fawa_gate, "updated": self.fawa_updated,
                           "updates": self.fawa_updates, "in_use": self._avg is not None or self._avg_state is not None}
        return out
