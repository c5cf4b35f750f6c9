"""Long-tail remedies inside adversarial training (Benz et al., question c; spec section 3).

Each method is PGD-AT (default) or TRADES (``base: trades``) with one change borrowed from
long-tailed recognition. Per-class quantities are (K,) tensors, so any class count works:

==================== =====================================================================================
``at-cost-sensitive`` class weights proportional to the class error on the **validation** split, updated
                      after every epoch: ``w_k ∝ (e_k + smoothing)^(1/temperature)``, mean 1
``at-resample``       class re-sampling: the epoch's order is drawn with per-sample probability ∝ s[y]
                      (class-balanced ``n_k^(power-1)``, or the cost-sensitive weights); loss unweighted
``at-focal``          focal loss ``(1 - p_y)^gamma * CE`` (Lin et al. 2017)
``at-class-balanced`` class-balanced loss (Cui et al. 2019): ``w_k ∝ (1 - beta) / (1 - beta^n_k)``
``at-ldam``           LDAM (Cao et al. 2019): ``CE(s * (z - m_y e_y), y)`` with ``m_k ∝ n_k^(-1/4)``
``at-logit-adjust``   logit adjustment (Menon et al. 2021): ``CE(z + tau * log pi, y)``
``at-class-eps``      a fixed training radius per class (multipliers of eps, or eps per class name)
==================== =====================================================================================

The loss of one batch, with per-class weights ``w`` (None: uniform) and the method's per-sample loss
``l`` (CE, focal, LDAM, logit-adjusted CE)::

    base pgd-at:  sum_i w[y_i] l(f(x'_i), y_i) / sum_i w[y_i]
    base trades:  sum_i w[y_i] l(f(x_i), y_i) / sum_i w[y_i] + beta * sum_i w[y_i] KL_i / sum_i w[y_i]

(``reduction: mean`` divides by the batch size instead, Cui et al.'s form.) A class whose weight is
0 contributes no gradient; a batch whose weights are all 0 gives a zero loss. The attack is always
the configured training attack on the **plain** model (PGD on CE, or TRADES' KL) at each sample's
radius ``sample_eps(y)``: margins and logit offsets shape the training loss, not the attack.

Per-class training counts ``n_k`` (class-balanced, LDAM, logit adjustment, re-sampling) come from the
trainer (``ctx.extra["train_counts"]``) or from the ``counts`` option. Everything a resumed run needs
is in ``state_dict``; the per-class quantities land in ``metrics.jsonl`` through ``epoch_state``.

Why one module: the long-tail baselines (Benz et al.'s seven) are each a few lines on
one shared base, LongTailAT, and its class-count options.
"""

from __future__ import annotations

import logging
import math
from typing import Annotated, Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field, field_validator

from ...errors import ConfigError, RobfairError
from ...utils import parse_eps
from ..losses import (class_balanced_weights, focal_loss, ldam_loss, ldam_margins, logit_adjusted_ce, trades_kl,
                      weighted_mean)
from .method import METHODS, Method, TradesOptions, TrainContext

__all__ = ["LongTailAT", "CostSensitiveAT", "ResampleAT", "FocalAT", "ClassBalancedAT", "LDAMAT",
           "LogitAdjustAT", "ClassEpsAT", "class_balanced_weights", "ldam_margins", "focal_loss"]

log = logging.getLogger(__name__)


#: per-class training counts given as an option (None: measured by the trainer)
Counts = list[Annotated[int, Field(ge=0)]] | None


# ================================================================================ the shared base
class LongTailAT(Method):
    """PGD-AT or TRADES with a per-sample loss, per-class weights and per-class radii to override.

    Subclasses change ``per_sample_loss`` (the label term), ``class_weights`` and/or ``class_eps``,
    and compute what they need from the class counts in ``setup``."""

    class Options(TradesOptions):
        base: Literal["pgd-at", "trades"] = Field(
            "pgd-at", description="pgd-at: loss on PGD examples; trades: loss on clean + beta * KL")
        reduction: Literal["weighted-mean", "mean"] = Field(
            "weighted-mean", description="divide the weighted sum by the sum of weights, or by the batch size")

    name = "longtail-base"
    base_option = "base"  # the training attack follows the base: TRADES' KL maximization or PGD on CE

    def __init__(self, options: Any = None, ctx: TrainContext | None = None) -> None:
        super().__init__(options, ctx)
        self._ready: TrainContext | None = None

    # ------------------------------------------------------------------ setup
    def on_train_start(self, ctx: TrainContext) -> None:
        self.ctx = ctx
        self._ensure()

    def _ensure(self) -> None:
        """Run ``setup`` once per context (the trainer's, or one a test or notebook sets)."""
        if self.ctx is not None and self._ready is not self.ctx:
            self.setup(self.ctx)
            self._ready = self.ctx

    def setup(self, ctx: TrainContext) -> None:
        """Compute the per-class quantities that depend on the data (class count, names, counts)."""

    def train_counts(self) -> torch.Tensor:
        """(K,) training samples per class: the ``counts`` option, else what the trainer measured."""
        assert self.ctx is not None, "the trainer sets method.ctx before training"
        k = self.ctx.num_classes
        given = getattr(self.options, "counts", None)
        if given is not None:
            if len(given) != k:
                raise ConfigError(f"method '{self.name}' option counts has {len(given)} entries but the data has "
                                  f"{k} classes; give one count per class or drop counts")
            return torch.tensor(given, dtype=torch.float64)
        counts = self.ctx.extra.get("train_counts")
        if counts is None:
            raise ConfigError(f"method '{self.name}' needs the training samples per class; train through "
                              "robfair's Trainer or set method_options.counts to one count per class")
        return torch.as_tensor(counts).double().cpu()

    def _dev(self, t: torch.Tensor) -> torch.Tensor:
        return t.to(self.ctx.device) if self.ctx is not None else t

    # ------------------------------------------------------------------ the loss
    def per_sample_loss(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """(N,) loss of the labelled term; plain cross-entropy here."""
        return F.cross_entropy(logits.float(), y, reduction="none")

    def loss(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, g: torch.Tensor,
             ctx: TrainContext) -> torch.Tensor:
        self._ensure()
        x_adv = self.adversarial(model, x, y, ctx)
        w = self.class_weights()
        wy = None if w is None else w.to(y.device)[y]
        red = self.options.reduction
        if self.options.base == "pgd-at":
            logits = model(x_adv)
            ctx.record(logits, y)
            return weighted_mean(self.per_sample_loss(logits, y), wy, red)
        logits = model(x)
        ctx.record(logits, y)
        loss_nat = weighted_mean(self.per_sample_loss(logits, y), wy, red)
        kl = trades_kl(logits, model(x_adv))
        return loss_nat + self.options.beta * weighted_mean(kl, wy, red)

    def class_weights(self) -> torch.Tensor | None:
        self._ensure()
        return None

    def class_eps(self) -> torch.Tensor | None:
        self._ensure()
        return None

    def epoch_state(self) -> dict[str, Any]:
        self._ensure()
        return {k: _short(v) for k, v in super().epoch_state().items()}


def _floats(t: torch.Tensor | None) -> list[float] | None:
    """Exact python floats (state dicts)."""
    return None if t is None else [float(v) for v in t.detach().cpu()]


def _short(values: Any) -> Any:
    """Float32 values as their shortest decimal (0.1, not 0.10000000149) for metrics.jsonl."""
    if isinstance(values, list) and values and all(isinstance(v, float) for v in values):
        return [float(str(np.float32(v))) if math.isfinite(v) else v for v in values]
    return values


# ================================================================================ cost-sensitive
_ERRORS = {"rob": "rob_err", "std": "std_err", "bndy": "bndy_err"}


@METHODS.register("at-cost-sensitive", help="AT with class weights proportional to validation class error")
class CostSensitiveAT(LongTailAT):
    """Class weights ∝ the class error on the validation split, recomputed after every epoch.

    ``w_k ∝ (e_k + smoothing)^(1/temperature)``, normalized to mean 1 over classes, with ``e_k`` the
    validation ``rob``/``std``/``bndy`` error of class k; ``momentum`` blends the previous weights in
    (``w <- m w + (1 - m) w_new``, renormalized). The first epoch trains with uniform weights. A class
    without validation samples takes the mean error of the others."""

    class Options(LongTailAT.Options):
        error: Literal["rob", "std", "bndy"] = Field("rob", description="which validation error sets the weights")
        smoothing: float = Field(0.05, ge=0, description="added to every class error (a class at 0 keeps a weight)")
        temperature: float = Field(1.0, gt=0, description="w ∝ (e + smoothing)^(1/temperature); large: uniform")
        momentum: float = Field(0.0, ge=0, lt=1, description="weight of the previous epoch's weights")

    name = "at-cost-sensitive"
    sources = {"method": "Benz et al. 2021 (question c): cost-sensitive class weights from validation error"}

    def __init__(self, options: Any = None, ctx: TrainContext | None = None) -> None:
        super().__init__(options, ctx)
        self._weights: torch.Tensor | None = None  # (K,) float32, on the context's device
        self._errors: torch.Tensor | None = None  # the validation errors of the last update

    @property
    def uses_validation(self) -> bool:
        return True

    def setup(self, ctx: TrainContext) -> None:
        if self.uses_validation:
            cfg = ctx.cfg
            if not cfg.val_per_class:
                raise ConfigError(f"method '{self.name}' sets class weights from the validation error but "
                                  "val_per_class is 0; set val_per_class (e.g. 0.1)")
            if self.options.error != "std" and str(cfg.val_attack).lower() == "none":
                raise ConfigError(f"method '{self.name}' uses the validation {self.options.error} error but "
                                  "val_attack is none; set val_attack (e.g. pgd10) or error: std")
        k = ctx.num_classes
        if self._weights is None or len(self._weights) != k:
            self._weights = torch.ones(k)
        self._weights = self._dev(self._weights)

    def class_weights(self) -> torch.Tensor | None:
        self._ensure()
        return self._weights

    def weights_from_errors(self, errors: np.ndarray) -> torch.Tensor:
        """The new (K,) weights for per-class validation errors (NaN: a class without samples)."""
        e = np.asarray(errors, dtype=np.float64).copy()
        known = np.isfinite(e)
        e[~known] = e[known].mean() if known.any() else 0.0
        raw = np.clip(e + self.options.smoothing, 0, None) ** (1.0 / self.options.temperature)
        new = raw / raw.mean() if raw.sum() > 0 else np.ones_like(raw)
        old = self._weights.detach().double().cpu().numpy() if self._weights is not None else np.ones_like(raw)
        m = self.options.momentum
        w = m * old + (1 - m) * new
        return torch.tensor(w / w.mean(), dtype=torch.float32)

    def on_epoch_end(self, ctx: TrainContext, val_report: Any | None) -> None:
        if not self.uses_validation:
            return
        if val_report is None:
            raise ConfigError(f"method '{self.name}' needs a validation report every epoch; set val_per_class > 0")
        self._ensure()
        errors = val_report.by_class[_ERRORS[self.options.error]].to_numpy(dtype=np.float64)
        self._errors = torch.tensor(errors, dtype=torch.float32)
        self._weights = self._dev(self.weights_from_errors(errors))

    def state_dict(self) -> dict[str, Any]:
        return {"weights": _floats(self._weights), "errors": _floats(self._errors)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("weights") is not None:
            self._weights = self._dev(torch.tensor(state["weights"], dtype=torch.float32))
        if state.get("errors") is not None:
            self._errors = torch.tensor(state["errors"], dtype=torch.float32)

    def epoch_state(self) -> dict[str, Any]:
        out = super().epoch_state()
        if self._errors is not None:
            out["class_error"] = _short(_floats(self._errors))
        return out


# ================================================================================ re-sampling
@METHODS.register("at-resample", help="AT with class re-sampling (class-balanced or validation-error driven)")
class ResampleAT(CostSensitiveAT):
    """Class re-sampling: each sample is drawn with probability ∝ ``s[y]``, the loss is unweighted.

    ``target: balanced`` (default) gives class k the share ``∝ n_k^power`` of every epoch
    (power 0: class-balanced sampling, 0.5: square-root sampling, 1: the data as it is), i.e.
    ``s_k = n_k^(power - 1)``; ``target: val-error`` uses the cost-sensitive weights
    (``s_k = w_k``, updated from the validation error each epoch; the options error, smoothing,
    temperature and momentum apply).

    ``mode: sampler`` (default) draws the whole epoch's order with replacement (same length as the
    training set, so the schedule is unchanged) through the trainer's ``epoch_order`` hook: a class
    is picked with its share, then a sample of it uniformly. ``mode: in-batch`` re-draws each batch
    from itself (``multinomial(s[y], B, replacement=True)``): it needs no trainer support but can only
    repeat classes that are in the batch, so it is importance weighting with extra variance."""

    class Options(CostSensitiveAT.Options):
        target: Literal["balanced", "val-error"] = Field("balanced", description="what sets the sampling weights")
        power: float = Field(0.0, ge=0, le=1, description="balanced: class share ∝ n_k^power")
        mode: Literal["sampler", "in-batch"] = Field("sampler", description="draw the epoch order, or each batch")
        counts: Counts = Field(None, description="training samples per class (default: measured)")

    name = "at-resample"
    sources = {"method": "class re-sampling (Benz et al. 2021); square-root sampling at power 0.5"}

    def __init__(self, options: Any = None, ctx: TrainContext | None = None) -> None:
        super().__init__(options, ctx)
        self._ordered_epoch: int | None = None

    @property
    def uses_validation(self) -> bool:
        return self.options.target == "val-error"

    def class_weights(self) -> torch.Tensor | None:
        self._ensure()
        return None  # the sampler re-balances; the loss is not re-weighted

    def sampling_weights(self) -> torch.Tensor:
        """(K,) relative probability of drawing one sample of each class (CPU, float64)."""
        self._ensure()
        if self.options.target == "val-error":
            assert self._weights is not None
            return self._weights.detach().double().cpu()
        n = self.train_counts()
        return torch.where(n > 0, n.clamp_min(1) ** (self.options.power - 1), torch.zeros_like(n))

    def class_share(self) -> torch.Tensor:
        """(K,) expected fraction of each class in a re-sampled epoch."""
        mass = self.train_counts() * self.sampling_weights()
        if float(mass.sum()) <= 0:
            raise ConfigError(f"method '{self.name}': every class has sampling weight 0; "
                              "use target: balanced or a positive smoothing")
        return mass / mass.sum()

    def epoch_order(self, labels: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor | None:
        """The epoch's sample indices (with replacement, ``len(labels)`` of them), or None in
        ``in-batch`` mode. Called by the trainer with its CPU order generator."""
        if self.options.mode != "sampler":
            return None
        self._ensure()
        y = labels.detach().cpu().long()
        k = self.ctx.num_classes if self.ctx is not None else int(y.max()) + 1
        counts = torch.bincount(y, minlength=k)
        mass = counts.double() * self.sampling_weights()
        if float(mass.sum()) <= 0:
            raise ConfigError(f"method '{self.name}': every class has sampling weight 0; "
                              "use target: balanced or a positive smoothing")
        n = len(y)
        by_class = torch.argsort(y, stable=True)
        starts = torch.cumsum(counts, 0) - counts
        cls = torch.multinomial(mass / mass.sum(), n, replacement=True, generator=generator)
        u = torch.rand(n, generator=generator, dtype=torch.float64)
        within = torch.minimum((u * counts[cls]).long(), counts[cls] - 1)
        if self.ctx is not None:
            self._ordered_epoch = self.ctx.epoch
        return by_class[starts[cls] + within]

    def loss(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, g: torch.Tensor,
             ctx: TrainContext) -> torch.Tensor:
        if self.options.mode == "sampler":
            if self._ordered_epoch != ctx.epoch:
                raise ConfigError(f"method '{self.name}' mode sampler needs a trainer that calls its epoch_order "
                                  "hook (robfair's Trainer does); use mode: in-batch in other loops")
            return super().loss(model, x, y, g, ctx)
        p = self._dev(self.sampling_weights().float()).to(y.device)[y]
        if not bool(p.sum() > 0):
            return torch.zeros((), device=x.device, requires_grad=True)
        idx = torch.multinomial(p, len(y), replacement=True, generator=ctx.generator)
        return super().loss(model, x[idx], y[idx], g[idx], ctx)

    def epoch_state(self) -> dict[str, Any]:
        out = super().epoch_state()
        out["sampling_weights"] = _short(_floats(self.sampling_weights()))
        out["class_share"] = _short(_floats(self.class_share()))
        return out


# ================================================================================ focal
@METHODS.register("at-focal", help="AT with the focal loss (1-p_y)^gamma * CE (Lin et al. 2017)")
class FocalAT(LongTailAT):
    """Focal loss on the adversarial examples (base pgd-at) or on TRADES' clean term (base trades):
    ``(1 - p_y)^gamma * CE``; ``gamma = 0`` is cross-entropy exactly."""

    class Options(LongTailAT.Options):
        gamma: float = Field(2.0, ge=0, description="focusing parameter; 0: cross-entropy")

    name = "at-focal"
    sources = {"method": "Lin et al., ICCV 2017 (focal loss)"}

    def per_sample_loss(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return focal_loss(logits, y, self.options.gamma)

    def epoch_state(self) -> dict[str, Any]:
        return {**super().epoch_state(), "gamma": self.options.gamma}


# ================================================================================ counts-based losses
class _CountsOptions(LongTailAT.Options):
    counts: Counts = Field(None, description="training samples per class (default: measured)")


@METHODS.register("at-class-balanced", help="AT with the class-balanced loss (Cui et al. 2019)")
class ClassBalancedAT(LongTailAT):
    """Class-balanced loss: class weights ``(1 - cb_beta) / (1 - cb_beta^n_k)`` (the inverse effective
    number of samples), mean 1; ``gamma > 0`` gives class-balanced focal loss. ``cb_beta = 0`` is
    plain AT; ``cb_beta -> 1`` approaches inverse-frequency weights."""

    class Options(_CountsOptions):
        cb_beta: float = Field(0.999, ge=0, lt=1, description="effective-number beta (Cui: 0.9 to 0.9999)")
        gamma: float = Field(0.0, ge=0, description="focal gamma (0: class-balanced cross-entropy)")

    name = "at-class-balanced"
    sources = {"method": "Cui et al., CVPR 2019 (class-balanced loss)"}

    def __init__(self, options: Any = None, ctx: TrainContext | None = None) -> None:
        super().__init__(options, ctx)
        self._weights: torch.Tensor | None = None

    def setup(self, ctx: TrainContext) -> None:
        self._weights = self._dev(class_balanced_weights(self.train_counts(), self.options.cb_beta))

    def class_weights(self) -> torch.Tensor | None:
        self._ensure()
        return self._weights

    def per_sample_loss(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return focal_loss(logits, y, self.options.gamma)


@METHODS.register("at-ldam", help="AT with the LDAM loss, margins C/n_k^(1/4) (Cao et al. 2019)")
class LDAMAT(LongTailAT):
    """LDAM: ``CE(s * (z - m_y e_y), y)`` with margins ``m_k = C / n_k^(1/4)``, C such that the
    rarest class gets ``max_margin``. Optional deferred re-weighting (LDAM-DRW): from epoch
    ``drw_epoch`` (0-based) on, class-balanced weights with ``drw_beta``.

    ``s`` multiplies the logits: the paper's s = 30 goes with its cosine (normalized) classifier;
    robfair's models return plain logits, so the default is 1 and margins are in logit units."""

    class Options(_CountsOptions):
        max_margin: float = Field(0.5, ge=0, description="the largest margin (rarest class)")
        s: float = Field(1.0, gt=0, description="logit scale (paper: 30 with a normalized classifier)")
        drw_epoch: int | None = Field(None, ge=0, description="epoch from which class-balanced weights apply")
        drw_beta: float = Field(0.9999, ge=0, lt=1, description="effective-number beta of the DRW weights")

    name = "at-ldam"
    sources = {"method": "Cao et al., NeurIPS 2019 (LDAM, DRW)"}

    def __init__(self, options: Any = None, ctx: TrainContext | None = None) -> None:
        super().__init__(options, ctx)
        self._margins: torch.Tensor | None = None
        self._drw: torch.Tensor | None = None

    def setup(self, ctx: TrainContext) -> None:
        counts = self.train_counts()
        self._margins = self._dev(ldam_margins(counts, self.options.max_margin))
        self._drw = self._dev(class_balanced_weights(counts, self.options.drw_beta))

    def class_weights(self) -> torch.Tensor | None:
        self._ensure()
        drw = self.options.drw_epoch
        if drw is None or self.ctx is None or self.ctx.epoch < drw:
            return None
        return self._drw

    def per_sample_loss(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        assert self._margins is not None
        return ldam_loss(logits, y, self._margins, self.options.s)

    def epoch_state(self) -> dict[str, Any]:
        self._ensure()
        return {**super().epoch_state(), "margins": _short(_floats(self._margins))}


@METHODS.register("at-logit-adjust", help="AT with the logit-adjusted loss CE(z + tau*log prior) (Menon et al.)")
class LogitAdjustAT(LongTailAT):
    """Logit-adjusted cross-entropy: ``CE(z + tau * log pi, y)`` with ``pi_k = n_k / N`` the training
    prior (an empty class counts as one sample). The model's raw logits then estimate the balanced
    posterior; ``tau = 0`` is cross-entropy exactly."""

    class Options(_CountsOptions):
        tau: float = Field(1.0, ge=0, description="scale of the log-prior offsets; 0: cross-entropy")

    name = "at-logit-adjust"
    sources = {"method": "Menon et al., ICLR 2021 (logit adjustment)"}

    def __init__(self, options: Any = None, ctx: TrainContext | None = None) -> None:
        super().__init__(options, ctx)
        self._offsets: torch.Tensor | None = None

    def setup(self, ctx: TrainContext) -> None:
        n = self.train_counts().clamp_min(1)
        self._offsets = self._dev((self.options.tau * torch.log(n / n.sum())).float())

    def per_sample_loss(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        assert self._offsets is not None
        return logit_adjusted_ce(logits, y, self._offsets)

    def epoch_state(self) -> dict[str, Any]:
        self._ensure()
        return {**super().epoch_state(), "logit_offsets": _short(_floats(self._offsets))}


# ================================================================================ per-class eps
@METHODS.register("at-class-eps", help="AT with a fixed training radius per class")
class ClassEpsAT(LongTailAT):
    """A fixed training radius per class, used by the attack through ``sample_eps``.

    Either ``multipliers`` (K factors of the global eps) or ``eps`` (class name -> radius, e.g.
    ``{cat: 12/255}``; a key that is no class name but a class index ``"3"`` names that class;
    classes not listed keep the global eps). A class with radius 0 trains on clean inputs. With
    neither, every class trains at the global eps (plain AT, with a warning in the log)."""

    class Options(LongTailAT.Options):
        multipliers: list[float] | None = Field(None, description="one factor of eps per class")
        eps: dict[str, float] | None = Field(None, description="class name (or index) -> training radius")

        @field_validator("multipliers")
        @classmethod
        def _non_negative(cls, v: list[float] | None) -> list[float] | None:
            if v is not None and any(not (math.isfinite(m) and m >= 0) for m in v):
                raise ValueError("multipliers must be finite and >= 0")
            return v

        @field_validator("eps", mode="before")
        @classmethod
        def _parse(cls, v: Any) -> Any:
            if v is None:
                return v
            if not isinstance(v, dict):
                raise ValueError("must map class names to radii, e.g. {cat: 12/255}")
            try:
                return {str(k): parse_eps(e, f"eps of class {k}") for k, e in v.items()}
            except RobfairError as e:
                raise ValueError(str(e)) from None

    name = "at-class-eps"
    sources = {"method": "a fixed training radius per class (Benz et al. 2021)"}

    def __init__(self, options: Any = None, ctx: TrainContext | None = None) -> None:
        super().__init__(options, ctx)
        if self.options.multipliers is not None and self.options.eps is not None:
            raise ConfigError(f"method '{self.name}' got both multipliers and eps; keep one of them in method_options")
        self._eps: torch.Tensor | None = None

    def setup(self, ctx: TrainContext) -> None:
        k, names = ctx.num_classes, list(ctx.class_names)
        if self.options.multipliers is None and self.options.eps is None:
            log.warning("%s: neither multipliers nor eps given; every class trains at eps %g (plain %s)",
                        self.name, ctx.eps, self.options.base)
        if self.options.multipliers is not None:
            mult = self.options.multipliers
            if len(mult) != k:
                raise ConfigError(f"method '{self.name}' has {len(mult)} multipliers but the data has {k} classes; "
                                  "give one per class")
            eps = torch.tensor(mult, dtype=torch.float64) * ctx.eps
        else:
            eps = torch.full((k,), float(ctx.eps), dtype=torch.float64)
            for key, e in (self.options.eps or {}).items():
                if key in names:
                    i = names.index(key)
                elif key.isdigit() and int(key) < k:
                    i = int(key)
                else:
                    raise ConfigError(f"method '{self.name}': eps names class {key!r}, which the data does not "
                                      f"have; use one of: {', '.join(names)}")
                eps[i] = e
        if bool((eps > 1).any()):
            raise ConfigError(f"method '{self.name}': class eps up to {float(eps.max()):g} exceeds 1 (pixels are "
                              "in [0, 1]); use radii such as 8/255")
        self._eps = self._dev(eps.float())

    def class_eps(self) -> torch.Tensor | None:
        self._ensure()
        return self._eps

    def state_dict(self) -> dict[str, Any]:
        return {"class_eps": _floats(self._eps)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("class_eps") is not None:
            self._eps = self._dev(torch.tensor(state["class_eps"], dtype=torch.float32))
