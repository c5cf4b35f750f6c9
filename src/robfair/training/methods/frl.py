"""Fair Robust Learning (Xu, Liu, Li, Jain, Tang; ICML 2021): TRADES with a dual loop on validation.

Four registered methods share one implementation:

=====================  ======================================================================
``frl-reweight``       class weights on the natural (CE) and boundary (KL) terms
``frl-remargin``       class weights on the natural term + a training radius per class
``frl-rwrm``           both (Reweight + Remargin; alias ``frl``)
``baseline-reweight``  one multiplier per class on the robust error, the same weight on both terms
=====================  ======================================================================

Each epoch (after validation, in ``on_epoch_end``) the multipliers take one step from the per-class
validation errors of the trainer's report (``val_attack``, PGD-20 in the configs, at the base eps)::

    gamma_nat_i  = e_i - e - tau_nat               (e_i: class standard error, e: overall)
    gamma_bndy_i = b_i - b - tau_bndy              (b_i: class boundary error, b: overall)
    lam_nat  <- Pi(lam_nat  + alpha1 * v(gamma_nat))
    lam_bndy <- Pi(lam_bndy + bndy_rate * alpha1 * v(gamma_bndy))
    psi      <- psi + alpha2 * v(gamma_bndy)                            (remargin)
    w_i      = 1/K + lam_i - sum(lam)/K                                 (nat and bndy separately)
    eps_i    = eps * clamp(exp(margin_scale * psi_i), margin_min, margin_max)

``Pi`` clips at 0 and rescales so ``sum(lam) <= lim`` (< 1, so every weight is >= (1 - lim)/K > 0 and
the weights sum to 1); ``v`` is the identity (``violation: signed``) or the positive part. alpha1 is
halved every ``alpha1_halve_every`` FRL epochs. The next epoch is one TRADES epoch with w_nat[y] on
the CE, w_bndy[y] on the KL and eps_y in the inner attack (whose step is ``rel_step * eps_y`` per
sample, so a 3x margin is reached and a zero margin gives clean inputs). ``mode: official`` and
``mode: paper`` pick the defaults of the choices the paper leaves open; docs/methods-frl.md has the
table. ``pretrain_epochs`` > 0 runs plain TRADES (or PGD-AT) first, from scratch; 0 fine-tunes the
model given by the config's ``init``.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator

from ...errors import ConfigError
from .method import METHODS, TrainContext
from .trades import TRADES

log = logging.getLogger(__name__)

#: the choices ``mode`` sets when the option is left empty (None)
MODE_DEFAULTS: dict[str, dict[str, Any]] = {
    # hannxu123/fair_robust HEAD a80547d (2022-04-27): frlrw.py / frlrmrw.py with utils_frl(2).py
    "official": {"violation": "signed", "bndy_rate": 2.0, "alpha1_halve_every": 40, "normalization": "ratio",
                 "beta": 1.5, "tau_nat": 0.07, "tau_bndy": 0.07, "alpha2": 0.2},
    # the first code commit 18d1177 (2021-06-09): joint normalization, beta 1, bounds 0.1, rate2 0.1, 120 epochs
    "official-2021": {"violation": "signed", "bndy_rate": 2.0, "alpha1_halve_every": 40, "normalization": "joint",
                      "beta": 1.0, "tau_nat": 0.1, "tau_bndy": 0.1, "alpha2": 0.1},
    # the paper's Algorithm 1 read literally (choices it leaves open: docs/methods-frl.md)
    "paper": {"violation": "positive", "bndy_rate": 1.0, "alpha1_halve_every": 0, "normalization": "ratio",
              "beta": 1.0, "tau_nat": 0.1, "tau_bndy": 0.1, "alpha2": 0.1},
}
#: the official code's commits, by mode (docs/methods-frl.md)
MODE_SOURCES = {"official": "hannxu123/fair_robust@a80547def881cb4ca99b50e7544f997f9a0210a7",
                "official-2021": "hannxu123/fair_robust@18d11779da18a93e2c6a5cefa3b709b5e9845948",
                "paper": "Xu et al., ICML 2021, Algorithms 1-2"}


# ================================================================================ the dual step
def project_multipliers(lam: torch.Tensor, lim: float) -> torch.Tensor:
    """Pi: clip at 0, then rescale so the sum is at most ``lim`` (the official ``normalize_lambda``)."""
    lam = lam.clamp_min(0)
    total = float(lam.sum())
    return lam * (lim / total) if total > lim else lam


def frl_weights(lam: torch.Tensor) -> torch.Tensor:
    """Class weights ``1/K + lam_i - sum(lam)/K`` of the Lagrangian: they sum to 1, and are positive
    whenever ``lam >= 0`` and ``sum(lam) < 1``."""
    k = lam.numel()
    return 1.0 / k + lam - lam.sum() / k


def class_margins(psi: torch.Tensor, eps: float, scale: float, lo: float, hi: float) -> torch.Tensor:
    """Per-class radius ``eps * clamp(exp(scale * psi), lo, hi)``."""
    return eps * torch.exp(scale * psi).clamp(lo, hi)


def _as_vector(values: Any, k: int, what: str) -> torch.Tensor:
    t = torch.as_tensor(values, dtype=torch.float64).flatten()
    if t.numel() != k:
        raise ConfigError(f"the FRL state holds {t.numel()} {what} values but the data has {k} classes; "
                          "resume a run of the same dataset or start a new one")
    return t.clone()


# ================================================================================ the method
class FRL(TRADES):
    """The FRL dual loop around a class-weighted TRADES epoch (see the module docstring).
    Subclasses choose which parts are on (registered as frl-reweight / frl-remargin / frl-rwrm /
    baseline-reweight)."""

    class Options(TRADES.Options):
        beta: float | None = Field(None, ge=0, description="TRADES beta (official 1.5, official-2021 and paper 1.0)")
        mode: Literal["official", "official-2021", "paper"] = Field(
            "official", description="defaults of every option left empty: official = the repository's HEAD "
                                    "a80547d, official-2021 = its first commit 18d1177, paper = Algorithm 1")
        tau_nat: float | None = Field(None, ge=0, description="tau1: allowed excess of a class's standard error "
                                                              "(official 0.07, official-2021/paper 0.1)")
        tau_bndy: float | None = Field(None, ge=0, description="tau2: allowed excess of a class's boundary error "
                                                               "(official 0.07, official-2021/paper 0.1)")
        tau_rob: float = Field(0.1, ge=0, description="baseline-reweight: allowed excess of a class's robust error")
        alpha1: float = Field(0.05, gt=0, description="multiplier step (rate1)")
        alpha2: float | None = Field(None, ge=0, description="remargin step on psi (rate2; official 0.2, "
                                                             "official-2021/paper 0.1)")
        bndy_rate: float | None = Field(None, gt=0, description="factor on alpha1 for lam_bndy (official 2, paper 1)")
        alpha1_halve_every: int | None = Field(
            None, ge=0, description="halve alpha1 every this many FRL epochs (official 40, paper 0 = never)")
        violation: Literal["signed", "positive"] | None = Field(
            None, description="step on gamma (official) or on max(gamma, 0) (paper reading)")
        lim: float = Field(0.5, gt=0, lt=1, description="cap on sum(lam); < 1 keeps every weight positive")
        margin_scale: float = Field(2.0, ge=0, description="eps_i = eps * clamp(exp(margin_scale * psi_i), ...)")
        margin_min: float = Field(0.98, ge=0, description="lower clamp of eps_i / eps (official 0.98)")
        margin_max: float = Field(3.0, gt=0, description="upper clamp of eps_i / eps (official 3; frlrm.py 2.5)")
        normalization: Literal["ratio", "mean-k", "joint"] | None = Field(
            None, description="ratio: sum w CE/sum w + beta sum w KL/sum w; mean-k: mean(K w CE) + beta "
                              "mean(K w KL); joint (official code): sum(w_n CE + beta w_b KL)/sum(w_n + w_b)")
        bndy_err: Literal["exact", "compat"] = Field(
            "exact", description="exact: P[clean right, adv wrong]; compat: clean acc - adv acc (FRL code)")
        pretrain_epochs: int = Field(0, ge=0, description="plain epochs before the dual loop (0: fine-tune from init)")
        initial_step: bool = Field(True, description="fine-tuning: take the first dual step on the initial model's "
                                                     "validation errors before epoch 1 (official order); False: "
                                                     "epoch 1 trains with uniform weights")
        pretrain_method: Literal["trades", "pgd-at"] = Field("trades", description="what the pre-training runs")
        pretrain_attack: str = Field("pgd10", description="pgd-at pre-training attack")

        @model_validator(mode="after")
        def _resolve(self) -> "FRL.Options":
            if self.margin_min > self.margin_max:
                raise ConfigError(f"FRL margin_min ({self.margin_min:g}) is above margin_max ({self.margin_max:g}); "
                                  "set margin_min <= margin_max in method_options")
            return self

    name: ClassVar[str] = "frl"
    sources: ClassVar[dict[str, str]] = {
        "method": "Xu, Liu, Li, Jain, Tang, ICML 2021 (To be Robust or to be Fair)",
        "mode=official": "official code at HEAD, hannxu123/fair_robust@a80547def881cb4ca99b50e7544f997f9a0210a7",
        "mode=official-2021": "the first official code, hannxu123/fair_robust@18d11779da18a93e2c6a5cefa3b709b5e9845948",
        "mode=paper": "the paper's Algorithms 1-2; choices it leaves open are robfair's (docs/methods-frl.md)"}
    #: per-method changes to MODE_DEFAULTS (the official HEAD's frlrw.py keeps bounds 0.1)
    mode_overrides: ClassVar[dict[str, dict[str, Any]]] = {}

    @classmethod
    def mode_defaults(cls, mode: str) -> dict[str, Any]:
        """The values ``mode`` gives the options left empty, for this registered method."""
        return {**MODE_DEFAULTS[mode], **cls.mode_overrides.get(mode, {})}

    @classmethod
    def parse_options(cls, options: Any) -> "FRL.Options":
        opts = super().parse_options(options)
        for key, value in cls.mode_defaults(opts.mode).items():
            if getattr(opts, key) is None:
                setattr(opts, key, value)
        return opts  # type: ignore[return-value]
    #: which parts of FRL are on
    reweight_nat: ClassVar[bool] = True
    reweight_bndy: ClassVar[bool] = True
    remargin: ClassVar[bool] = True
    baseline: ClassVar[bool] = False

    def __init__(self, options: Any = None, ctx: TrainContext | None = None) -> None:
        super().__init__(options, ctx)
        self.num_classes = 0
        self.lam_nat = self.lam_bndy = self.lam_rob = self.psi = torch.zeros(0, dtype=torch.float64)
        self.gamma_nat = self.gamma_bndy = self.gamma_rob = None
        self.updates = 0  # dual steps taken so far
        self.alpha1_now = self.options.alpha1
        self._cache: dict[str, torch.Tensor | None] = {}
        self._pretrain_attack: Any = None

    # ------------------------------------------------------------------ phase and per-class hooks
    @property
    def active(self) -> bool:
        """True once FRL's weights and margins are in use: from the start when fine-tuning, after the
        first dual step (at the end of the last pre-training epoch) otherwise."""
        return self.options.pretrain_epochs == 0 or self.updates > 0

    def _refresh(self) -> None:
        """Recompute the per-class tensors the hooks return, on the training device."""
        o, dev = self.options, self.ctx.device if self.ctx is not None else torch.device("cpu")

        def put(t: torch.Tensor) -> torch.Tensor:
            return t.to(device=dev, dtype=torch.float32)

        if self.baseline:
            w = put(frl_weights(self.lam_rob))
            self._cache = {"nat": w, "bndy": w, "eps": None}
            return
        self._cache = {
            "nat": put(frl_weights(self.lam_nat)),
            "bndy": put(frl_weights(self.lam_bndy)) if self.reweight_bndy else None,
            "eps": put(class_margins(self.psi, self.ctx.eps if self.ctx else 0.0, o.margin_scale, o.margin_min,
                                     o.margin_max)) if self.remargin else None,
        }

    def class_weights(self) -> torch.Tensor | None:
        return self._cache.get("nat") if self.active else None

    def boundary_weights(self) -> torch.Tensor | None:
        return self._cache.get("bndy") if self.active else None

    def class_eps(self) -> torch.Tensor | None:
        return self._cache.get("eps") if self.active else None

    # ------------------------------------------------------------------ training
    def on_train_start(self, ctx: TrainContext) -> None:
        self.ctx = ctx
        k = ctx.num_classes
        if self.num_classes != k:
            self.num_classes = k
            self.lam_nat, self.lam_bndy, self.lam_rob, self.psi = (torch.zeros(k, dtype=torch.float64)
                                                                   for _ in range(4))
        if str(ctx.cfg.val_attack).lower() == "none":
            raise ConfigError(f"{self.name} steps its multipliers on validation boundary / robust errors but "
                              "val_attack is 'none'; set val_attack: pgd20")
        if not self.options.pretrain_epochs and not ctx.cfg.init and not ctx.cfg.model_file:  # a model file is its start
            log.warning("%s fine-tunes but the config names no init checkpoint: set init (--init) to a TRADES / "
                        "PGD-AT model, or pretrain_epochs to train from scratch", self.name)
        inner = getattr(ctx.attack, "attack", ctx.attack)
        if self.remargin and getattr(inner, "step", None) is not None:
            raise ConfigError(f"{self.name} trains each class at its own eps, so the attack step must scale with it; "
                              "remove attack_options.step and set rel_step instead (e.g. 0.25)")
        steps, rel = getattr(inner, "steps", None), getattr(inner, "rel_step", None)
        if steps is not None and rel is not None and steps * rel < 1:
            log.warning("%s: %d steps of %g*eps_i cannot reach the edge of the ball; raise steps or rel_step",
                        self.name, steps, rel)
        if self.options.pretrain_epochs and self.options.pretrain_method == "pgd-at" and self._pretrain_attack is None:
            self._pretrain_attack = ctx.build_attack(self.options.pretrain_attack, {})
        self._refresh()

    def loss(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, g: torch.Tensor,
             ctx: TrainContext) -> torch.Tensor:
        if not self.active and self._pretrain_attack is not None:  # PGD-AT pre-training
            x_adv = self._pretrain_attack(model, x, y, ctx.eps, generator=ctx.generator)
            logits = model(x_adv)
            ctx.record(logits, y)
            return F.cross_entropy(logits, y)
        # pre-training (hooks None): plain TRADES at FRL's beta; then the class-weighted TRADES loss
        return super().loss(model, x, y, g, ctx)

    def term_normalization(self) -> str:
        """Pre-training is plain TRADES (ratio); the dual loop uses the configured normalization."""
        return self.options.normalization if self.active else "ratio"

    # ------------------------------------------------------------------ the dual step
    @property
    def initial_validation(self) -> bool:  # type: ignore[override]
        return self.options.initial_step and self.options.pretrain_epochs == 0

    def on_initial_validation(self, ctx: TrainContext, val_report: Any) -> None:
        self.update(val_report, frl_epoch=1)

    def on_epoch_end(self, ctx: TrainContext, val_report: Any | None) -> None:
        p = self.options.pretrain_epochs
        if ctx.epoch < p - 1:  # pre-training: the first step follows the last pre-training epoch
            return
        if val_report is None:
            raise ConfigError(f"{self.name} needs the validation report every epoch; pass a validation set "
                              "(val_per_class > 0)")
        self.update(val_report, frl_epoch=ctx.epoch + 2 - p)

    def update(self, report: Any, frl_epoch: int) -> None:
        """One dual step from a validation ``GroupReport``; it prepares FRL epoch ``frl_epoch`` (1-based),
        whose alpha1 is ``alpha1 * 0.5 ** (frl_epoch // alpha1_halve_every)``."""
        o, k = self.options, self.num_classes
        if report.num_classes != k:
            raise ConfigError(f"the validation report has {report.num_classes} classes but the model {k}; "
                              "validate on the training data's classes")
        cls, tot = report.by_class, report.overall
        bkey = "bndy_err" if o.bndy_err == "exact" else "compat_bndy_err"

        def excess(col: str, tau: float) -> torch.Tensor:
            gamma = torch.tensor(cls[col].to_numpy(dtype=float, copy=True), dtype=torch.float64) - float(tot[col]) - tau
            empty = torch.isnan(gamma)
            if bool(empty.any()):
                log.warning("%s: classes %s have no validation samples; their multipliers stay put",
                            self.name, [report.class_names[i] for i in torch.nonzero(empty).flatten().tolist()])
            gamma = torch.nan_to_num(gamma, nan=0.0)
            return gamma.clamp_min(0) if o.violation == "positive" else gamma

        halvings = frl_epoch // o.alpha1_halve_every if o.alpha1_halve_every else 0
        a1 = self.alpha1_now = o.alpha1 * 0.5 ** halvings
        if self.baseline:
            self.gamma_rob = excess("rob_err", o.tau_rob)
            self.lam_rob = project_multipliers(self.lam_rob + a1 * self.gamma_rob, o.lim)
        else:
            self.gamma_nat, self.gamma_bndy = excess("std_err", o.tau_nat), excess(bkey, o.tau_bndy)
            self.lam_nat = project_multipliers(self.lam_nat + a1 * self.gamma_nat, o.lim)
            if self.reweight_bndy:
                self.lam_bndy = project_multipliers(self.lam_bndy + o.bndy_rate * a1 * self.gamma_bndy, o.lim)
            if self.remargin:
                self.psi = self.psi + o.alpha2 * self.gamma_bndy
        self.updates += 1
        self._refresh()
        log.info("%s dual step %d: %s", self.name, self.updates, self._state_numbers())

    # ------------------------------------------------------------------ state
    def _state_numbers(self) -> dict[str, Any]:
        def lst(t: torch.Tensor | None) -> list[float] | None:
            return None if t is None else [float(v) for v in t]

        if self.baseline:
            return {"lambda_rob": lst(self.lam_rob), "gamma_rob": lst(self.gamma_rob)}
        out = {"lambda_nat": lst(self.lam_nat), "gamma_nat": lst(self.gamma_nat), "gamma_bndy": lst(self.gamma_bndy)}
        if self.reweight_bndy:
            out["lambda_bndy"] = lst(self.lam_bndy)
        if self.remargin:
            out["psi"] = lst(self.psi)
        return out

    def epoch_state(self) -> dict[str, Any]:
        """What metrics.jsonl logs per epoch: the state *after* this epoch's dual step (what the next
        epoch trains with) and the violations gamma measured on this epoch's validation."""
        out = super().epoch_state()  # class_weights, class_eps, boundary_weights (when active)
        out.update({"phase": "frl" if self.active else "pretrain", "dual_steps": self.updates,
                    "alpha1": self.alpha1_now, **self._state_numbers()})
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"lam_nat": self.lam_nat.tolist(), "lam_bndy": self.lam_bndy.tolist(), "lam_rob": self.lam_rob.tolist(),
                "psi": self.psi.tolist(), "updates": self.updates, "alpha1_now": self.alpha1_now,
                "gamma": {k: None if v is None else v.tolist() for k, v in
                          (("nat", self.gamma_nat), ("bndy", self.gamma_bndy), ("rob", self.gamma_rob))}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        k = self.num_classes = self.num_classes or len(state["lam_nat"])
        self.lam_nat = _as_vector(state["lam_nat"], k, "multiplier")
        self.lam_bndy = _as_vector(state["lam_bndy"], k, "multiplier")
        self.lam_rob = _as_vector(state["lam_rob"], k, "multiplier")
        self.psi = _as_vector(state["psi"], k, "margin")
        self.updates = int(state["updates"])
        self.alpha1_now = float(state["alpha1_now"])
        g = state.get("gamma") or {}
        self.gamma_nat, self.gamma_bndy, self.gamma_rob = (
            None if g.get(n) is None else _as_vector(g[n], k, "violation") for n in ("nat", "bndy", "rob"))
        self._refresh()


@METHODS.register("frl-reweight", help="FRL Reweight: TRADES with class weights on CE and KL from a dual loop "
                                       "on validation std/boundary error (Xu et al. 2021)")
class FRLReweight(FRL):
    """FRL Reweight: dual multipliers on each class's standard and boundary error weight the CE and KL."""

    name = "frl-reweight"
    reweight_bndy = True
    remargin = False
    # HEAD frlrw.py: beta 1.5, bound0 = bound1 = 0.1 (frlrmrw.py: 0.07)
    mode_overrides = {"official": {"tau_nat": 0.1, "tau_bndy": 0.1}}


@METHODS.register("frl-remargin", help="FRL Remargin: class weights on CE and a per-class training eps "
                                       "from validation boundary error (Xu et al. 2021)")
class FRLRemargin(FRL):
    """FRL Remargin: multipliers on standard error weight the CE; boundary error enlarges the class eps."""

    name = "frl-remargin"
    reweight_bndy = False
    remargin = True


@METHODS.register("frl-rwrm", aliases=("frl",), help="FRL Reweight+Remargin: class weights on CE and KL and a "
                                                     "per-class training eps (Xu et al. 2021)")
class FRLReweightRemargin(FRL):
    """FRL Reweight + Remargin: weights on both TRADES terms and a per-class training eps."""

    name = "frl-rwrm"
    reweight_bndy = True
    remargin = True


@METHODS.register("baseline-reweight", help="FRL's Baseline Reweight: one multiplier per class on the validation "
                                            "robust error weights both TRADES terms")
class BaselineReweight(FRL):
    """Baseline Reweight (FRL paper): gamma = rob_err_i - rob_err - tau_rob, one weight on CE and KL."""

    name = "baseline-reweight"
    reweight_bndy = False
    remargin = False
    baseline = True


__all__ = ["FRL", "FRLReweight", "FRLRemargin", "FRLReweightRemargin", "BaselineReweight", "project_multipliers",
           "frl_weights", "class_margins", "MODE_DEFAULTS", "MODE_SOURCES"]
