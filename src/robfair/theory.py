"""Exact fixtures from the theory of robust fairness (Xu et al. 2021, spec section 4).

Binary Gaussian mixture: y = -1 or +1 with probability 1/2 each,
``x | y=+1 ~ N(theta, (K sigma)^2 I)``, ``x | y=-1 ~ N(-theta, sigma^2 I)``, ``theta = eta * 1`` in R^d.
``K > 1`` makes class +1 the noisier, "hard" class. (K here is a variance ratio, not a class count.)

Everything here is closed form or exact per sample, so attacks, distances and metrics can be checked
against it on a CPU in milliseconds:

- :func:`gaussian_mixture_errors` - per-class standard errors of the optimal natural (``eps=None``)
  or optimal robust (L-inf radius ``eps``) linear classifier, the formulas of spec section 4;
- :func:`optimal_linear_classifier` - those classifiers as ``(w, b)``, ``f(x) = sign(w.x + b)``;
- :func:`linear_classifier_errors` - exact standard / robust / boundary error of *any* linear
  classifier on the mixture;
- :func:`linear_robust_error` - exact per-sample robust error of a linear classifier on given data;
- :func:`sample_gaussian_mixture` - draws from the mixture;
- :func:`sample_group_mixture` - the mixture with protected groups: group g (share ``group_sizes[g]``)
  scales both class standard deviations by ``group_scales[g]``; :func:`group_errors` gives the exact
  per-(group, class) errors of any linear classifier on it;
- :func:`train_linear` - logistic regression (``eps=0``) or L-inf adversarial training of a linear
  model with the closed-form inner maximization ``x' = x - eps * y * sign(w)``;
- :func:`mixture_dataset` - samples as a robfair :class:`~robfair.data.Dataset` (pixels in [0, 1]);
- :func:`gaussian_lab` - the lab behind ``robfair theory gaussian``: closed form vs trained vs
  Monte Carlo, per class (and group).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Sequence

import numpy as np
import pandas as pd
import torch
from scipy.special import ndtr  # standard normal CDF

from .data import Dataset
from .errors import ConfigError, DataError
from .metrics import wilson

__all__ = [
    "PerClass",
    "gaussian_mixture_errors",
    "optimal_linear_classifier",
    "linear_classifier_errors",
    "linear_robust_error",
    "dual_norm",
    "sample_gaussian_mixture",
    "sample_group_mixture",
    "group_errors",
    "train_linear",
    "fit_threshold",
    "mixture_dataset",
    "gaussian_lab",
    "LabResult",
]

_DUAL = {"linf": 1, "l2": 2, "l1": np.inf}


class PerClass(NamedTuple):
    """One value per class of the mixture: ``neg`` for y = -1, ``pos`` for y = +1."""

    neg: float
    pos: float


def _check(d: int, eta: float, sigma: float, K: float, eps: float | None) -> float:
    if int(d) != d or d < 1:
        raise ConfigError(f"d must be a positive integer, got {d}; pass the input dimension")
    if sigma <= 0 or not math.isfinite(sigma):
        raise ConfigError(f"sigma must be > 0, got {sigma}; pass the standard deviation of class -1")
    if K < 1 or not math.isfinite(K):
        raise ConfigError(f"K must be >= 1, got {K}; pass the ratio of the class +1 to class -1 standard deviations")
    if eta <= 0:
        raise ConfigError(f"eta must be > 0, got {eta}; pass the per-coordinate mean of class +1")
    e = 0.0 if eps is None else float(eps)
    if not 0 <= e < eta:
        raise ConfigError(f"eps must satisfy 0 <= eps < eta (= {eta}), got {eps}; a larger radius makes the classes inseparable")
    return e


def _threshold(d: int, eta: float, sigma: float, K: float, eps: float) -> float:
    """Decision threshold t on s = sum(x)/sqrt(d) (predict +1 when s > t) of the optimal classifier.

    For eps = 0 this is the Bayes boundary between N(-mu, sigma^2) and N(mu, (K sigma)^2) on the
    line along 1 (the root between the means); for eps > 0 the robust problem is the natural one with
    both means moved eps*sqrt(d) towards each other."""
    mu = math.sqrt(d) * (eta - eps)
    if K == 1:
        return 0.0
    B = 2 * mu / ((K * K - 1) * sigma)
    q = 2 * math.log(K) / (K * K - 1)
    return sigma * (K * math.sqrt(B * B + q) - B) - mu


def gaussian_mixture_errors(d: int, eta: float, sigma: float, K: float, eps: float | None = None) -> PerClass:
    """Per-class standard errors (std_err(-1), std_err(+1)) of the optimal linear classifier (spec section 4).

    ``eps=None``: the optimal natural classifier, with A = 2 sqrt(d) eta / ((K^2-1) sigma) and
    q = 2 ln K / (K^2-1): std_err(-1) = Phi(A - K sqrt(A^2+q)), std_err(+1) = Phi(-K A + sqrt(A^2+q)).
    ``eps``: the optimal L-inf robust classifier, with B = 2 sqrt(d) (eta-eps) / ((K^2-1) sigma):
    std_err(-1) = Phi(B - K sqrt(B^2+q) - sqrt(d) eps / sigma),
    std_err(+1) = Phi(-K B + sqrt(B^2+q) - sqrt(d) eps / (K sigma)).
    K = 1 is handled as the limit (threshold 0). At d=50, eta=0.1, sigma=1, K=2 this gives
    0.1184 / 0.4540 (natural) and 0.0598 / 0.5284 (eps = 0.05)."""
    e = _check(d, eta, sigma, K, eps)
    rd = math.sqrt(d)
    if K == 1:
        err = float(ndtr(-rd * eta / sigma))
        return PerClass(err, err)
    q = 2 * math.log(K) / (K * K - 1)
    B = 2 * rd * (eta - e) / ((K * K - 1) * sigma)
    root = math.sqrt(B * B + q)
    return PerClass(
        float(ndtr(B - K * root - rd * e / sigma)),
        float(ndtr(-K * B + root - rd * e / (K * sigma))),
    )


def optimal_linear_classifier(d: int, eta: float, sigma: float, K: float, eps: float | None = None) -> tuple[np.ndarray, float]:
    """``(w, b)`` of the optimal natural (``eps=None``) or L-inf robust linear classifier
    ``f(x) = sign(w.x + b)``: w = 1 (all ones) and b = -sqrt(d) * t for the threshold t of
    :func:`gaussian_mixture_errors`; its errors are exactly the closed forms there."""
    e = _check(d, eta, sigma, K, eps)
    return np.ones(int(d)), -math.sqrt(d) * _threshold(int(d), eta, sigma, K, e)


def dual_norm(w: Any, norm: str = "linf") -> np.ndarray:
    """||w||_q for the dual q of the threat-model norm (linf -> L1, l2 -> L2, l1 -> Linf), over the last axis."""
    if norm not in _DUAL:
        raise ConfigError(f"unknown norm {norm!r}; choose one of: {', '.join(_DUAL)}")
    return np.linalg.norm(_np(w), ord=_DUAL[norm], axis=-1)


def linear_classifier_errors(w: Any, b: float, eta: float, sigma: float, K: float, eps: float = 0.0,
                             norm: str = "linf") -> dict[str, PerClass]:
    """Exact per-class ``std_err``, ``rob_err`` (radius ``eps`` in ``norm``) and ``bndy_err`` of the
    linear classifier sign(w.x + b) on the mixture (any w, b; w.x is Gaussian given y)."""
    w = _np(w).astype(float)
    if w.ndim != 1:
        raise DataError(f"w must be a 1-D weight vector, got shape {w.shape}; pass one weight per input coordinate")
    _check(w.size, eta, sigma, K, None)
    if eps < 0:
        raise ConfigError(f"eps must be >= 0, got {eps}; pass the attack radius")
    s, l2 = w.sum(), np.linalg.norm(w)
    if l2 == 0:
        raise DataError("w is all zeros; pass a non-zero weight vector")
    margin = float(eps * dual_norm(w, norm))
    mu_neg, sd_neg = -eta * s + b, sigma * l2  # w.x + b | y = -1
    mu_pos, sd_pos = eta * s + b, K * sigma * l2  # w.x + b | y = +1

    def errs(m: float) -> PerClass:  # P[w.x + b > -m | -1], P[w.x + b < m | +1]
        return PerClass(float(ndtr((mu_neg + m) / sd_neg)), float(ndtr((m - mu_pos) / sd_pos)))

    std, rob = errs(0.0), errs(margin)
    return {"std_err": std, "rob_err": rob, "bndy_err": PerClass(rob.neg - std.neg, rob.pos - std.pos)}


def linear_robust_error(w: Any, b: Any, x: Any, y: Any, eps: Any, norm: str = "linf") -> np.ndarray:
    """Per-sample exact robust error of sign(w.x + b) under a ``norm`` ball of radius ``eps``
    (a float or one per sample): True where the sample is misclassified, or correctly classified
    with |w.x + b| <= eps * ||w||_dual (an attack can reach or cross the boundary). Points on the
    boundary count as errors. ``y`` in {-1, +1}; numpy arrays or torch tensors."""
    w, x, y = _np(w).astype(float), _np(x).astype(float), _np(y)
    if x.ndim != 2 or x.shape[1] != w.shape[-1]:
        raise DataError(f"x must be (N, {w.shape[-1]}), got shape {x.shape}; pass one row per sample")
    if y.shape != (x.shape[0],) or not np.isin(y, (-1, 1)).all():
        raise DataError("y must be one label in {-1, +1} per sample; convert 0/1 labels with 2*y - 1")
    eps = np.asarray(_np(eps), dtype=float)
    if (eps < 0).any():
        raise ConfigError("eps must be >= 0; pass the attack radius")
    margin = y * (x @ w + float(_np(b)))
    return margin <= eps * dual_norm(w, norm)


def sample_gaussian_mixture(n: int, d: int, eta: float, sigma: float, K: float, *, seed: int | None = None,
                            generator: np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``n`` samples: ``x`` (n, d) float64 and ``y`` (n,) int64 in {-1, +1} (equiprobable).
    Pass ``generator`` (a numpy Generator) or ``seed``."""
    _check(d, eta, sigma, K, None)
    rng = generator if generator is not None else np.random.default_rng(seed)
    y = np.where(rng.random(n) < 0.5, -1, 1).astype(np.int64)
    z = rng.standard_normal((n, int(d)))
    scale = np.where(y > 0, K * sigma, sigma)[:, None]
    return y[:, None] * eta + scale * z, y


def _np(x: Any) -> np.ndarray:
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        x = x.detach().cpu()
    return np.asarray(x)


# ============================================================================ groups
def _groups(group_sizes: Sequence[float], group_scales: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    sizes = np.asarray(list(group_sizes), dtype=float)
    scales = np.asarray(list(group_scales), dtype=float)
    if sizes.ndim != 1 or sizes.size == 0 or (sizes <= 0).any() or not np.isfinite(sizes).all():
        raise ConfigError(f"group sizes {list(group_sizes)} must be positive numbers, one per group; e.g. 0.8,0.2")
    if scales.size == 1 and sizes.size > 1:
        scales = np.repeat(scales, sizes.size)
    if scales.shape != sizes.shape:
        raise ConfigError(f"{sizes.size} group sizes but {scales.size} group scales; give one scale per group")
    if (scales <= 0).any() or not np.isfinite(scales).all():
        raise ConfigError(f"group scales {list(group_scales)} must be positive; e.g. 1,1.5")
    return sizes / sizes.sum(), scales


def sample_group_mixture(n: int, d: int, eta: float, sigma: float, K: float, *,
                         group_sizes: Sequence[float] = (1.0,), group_scales: Sequence[float] = (1.0,),
                         seed: int | None = None, generator: np.random.Generator | None = None
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(x, y, g)``: the spec section 4 mixture with protected groups.

    g ~ Categorical(group_sizes) (normalized), y = +-1 equiprobable, and
    ``x | y, g ~ N(y * eta * 1, (group_scales[g] * sigma * K**[y=+1])^2 I)``: a group with a larger
    scale is noisier (harder) for both classes. One group with scale 1 is exactly
    :func:`sample_gaussian_mixture`'s distribution."""
    _check(d, eta, sigma, K, None)
    p, scales = _groups(group_sizes, group_scales)
    rng = generator if generator is not None else np.random.default_rng(seed)
    g = rng.choice(p.size, size=int(n), p=p).astype(np.int64)
    y = np.where(rng.random(int(n)) < 0.5, -1, 1).astype(np.int64)
    z = rng.standard_normal((int(n), int(d)))
    scale = (scales[g] * sigma * np.where(y > 0, K, 1.0))[:, None]
    return y[:, None] * eta + scale * z, y, g


def group_errors(w: Any, b: float, eta: float, sigma: float, K: float, eps: float = 0.0, *,
                 group_scales: Sequence[float] = (1.0,), norm: str = "linf") -> list[dict[str, PerClass]]:
    """Exact ``std_err`` / ``rob_err`` / ``bndy_err`` per class of the linear classifier sign(w.x + b),
    one dict per group (group g has standard deviation ``group_scales[g] * sigma``)."""
    _, scales = _groups([1.0] * len(list(group_scales)), group_scales)
    return [linear_classifier_errors(w, b, eta, sigma * s, K, eps=eps, norm=norm) for s in scales]


# ============================================================================ training linear models
def train_linear(x: Any, y: Any, *, eps: float = 0.0, norm: str = "linf", weight_decay: float = 0.0,
                 max_iter: int = 500) -> tuple[np.ndarray, float]:
    """Fit ``(w, b)`` of sign(w.x + b) by (robust) logistic regression, full batch, float64 L-BFGS.

    ``eps = 0``: logistic regression, mean softplus(-y (w.x + b)). ``eps > 0``: adversarial training
    with the exact inner maximization of a linear model: the worst point of the ``norm`` ball is
    ``x' = x - eps * y * sign(w)`` (L-inf; L2: ``- eps * y * w / ||w||``), where
    ``y (w.x' + b) = y (w.x + b) - eps ||w||_dual``, so the loss is the mean of
    ``softplus(-y (w.x + b) + eps ||w||_dual)`` (convex). ``y`` in {-1, +1}."""
    xt = torch.as_tensor(_np(x), dtype=torch.float64)
    yt = torch.as_tensor(_np(y), dtype=torch.float64)
    if xt.ndim != 2 or yt.shape != (xt.shape[0],) or not bool(((yt == 1) | (yt == -1)).all()):
        raise DataError("train_linear needs x (N, d) and y in {-1, +1}; convert 0/1 labels with 2*y - 1")
    if eps < 0:
        raise ConfigError(f"eps must be >= 0, got {eps}; pass the training radius")
    q = _DUAL.get(norm)
    if q is None:
        raise ConfigError(f"unknown norm {norm!r}; choose one of: {', '.join(_DUAL)}")
    # start at the difference of class means (a good direction), small scale
    w0 = (xt[yt > 0].mean(0) - xt[yt < 0].mean(0)) if (yt > 0).any() and (yt < 0).any() else torch.zeros(xt.shape[1], dtype=torch.float64)
    w = (0.1 * w0 / w0.norm().clamp_min(1e-12)).clone().requires_grad_(True)
    b = torch.zeros((), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], lr=1, max_iter=max_iter, tolerance_grad=1e-10, tolerance_change=1e-14,
                            history_size=20, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        margin = yt * (xt @ w + b)
        if eps > 0:
            margin = margin - eps * torch.linalg.vector_norm(w, ord=q)
        loss = torch.nn.functional.softplus(-margin).mean() + 0.5 * weight_decay * (w * w).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return w.detach().numpy().copy(), float(b.detach())


def fit_threshold(w: Any, x: Any, y: Any, *, eps: float = 0.0, norm: str = "linf") -> float:
    """The bias ``b`` minimizing the empirical (robust, radius ``eps``) 0-1 error, averaged over the
    two classes, of sign(w.x + b) for a fixed ``w``: an exact search over the sorted scores.

    A sample is a (robust) error when ``y (w.x + b) <= eps ||w||_dual``. Logistic regression's bias
    minimizes the logistic loss instead, which is not the 0-1 optimum when the classes have
    different variances; this recovers the latter for the trained direction."""
    w, x, y = _np(w).astype(float), _np(x).astype(float), _np(y)
    m = float(eps * dual_norm(w, norm))
    s = x @ w
    pos, neg = s[y > 0], s[y < 0]
    if pos.size == 0 or neg.size == 0:
        raise DataError("fit_threshold needs samples of both classes; pass y with -1 and +1")
    # errors(b) = P[s + b <= m | +1] / 2 + P[s + b >= -m | -1] / 2: piecewise constant in b,
    # changing only at b = m - pos_i and b = -m - neg_j; try every breakpoint (and just past it)
    cand = np.concatenate([m - pos, -m - neg])
    cand = np.unique(np.concatenate([cand - 1e-9, cand + 1e-9]))
    ps, ns = np.sort(pos), np.sort(neg)
    err_pos = np.searchsorted(ps, m - cand, side="right") / ps.size
    err_neg = 1 - np.searchsorted(ns, -m - cand, side="left") / ns.size
    total = err_pos + err_neg
    best = np.flatnonzero(total == total.min())
    return float(cand[best].mean()) if best.size else 0.0


# ============================================================================ as a robfair dataset
def mixture_dataset(x: Any, y: Any, g: Any = None, *, scale: float = 0.1, center: float = 0.5,
                    group_names: Sequence[str] | None = None, name: str = "gaussian"):
    """Mixture samples as a :class:`robfair.data.Dataset`: pixels ``center + scale * x`` clipped to
    [0, 1], shaped (N, 1, 1, d); labels 0 (y = -1) and 1 (y = +1); group ids ``g``.

    The map is affine, so a radius ``e`` in pixel space is ``e / scale`` in the mixture's units.
    Clipping changes the distribution; pick ``scale`` so that it is rare (the fraction clipped is
    logged)."""
    xa = center + scale * _np(x).astype(np.float64)
    clipped = float(((xa < 0) | (xa > 1)).mean())
    if clipped > 0:
        logging.getLogger(__name__).info("mixture_dataset: %.4f%% of the coordinates clipped to [0, 1]", 100 * clipped)
    xa = np.clip(xa, 0, 1).astype(np.float32)[:, None, None, :]
    labels = (_np(y) > 0).astype(np.int64)
    gids = None if g is None else _np(g).astype(np.int64)
    names = None if gids is None else (list(group_names) if group_names is not None
                                       else [f"g{i}" for i in range(int(gids.max()) + 1)])
    return Dataset(x=torch.from_numpy(xa), y=torch.from_numpy(labels), classes=["-1", "+1"],
                   g=None if gids is None else torch.from_numpy(gids), groups=names, name=name)


# ============================================================================ the lab
@dataclass
class LabResult:
    """The rows of ``robfair theory gaussian``: one per (model, group, class).

    Columns: ``model`` (natural / robust), ``group``, ``cls`` (-1 easy / +1 hard), ``n_test``, and
    for each of ``std_err`` and ``rob_err`` (at ``eps``): ``closed`` (the spec section 4 optimal
    classifier, exact), ``trained`` (the trained linear classifier, exact on the distribution),
    ``mc`` (the trained classifier on fresh test samples) with Wilson ``mc_lo``/``mc_hi``."""

    setting: dict[str, Any]
    rows: list[dict[str, Any]]
    classifiers: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_frame(self):
        return pd.DataFrame(self.rows)

    def to_json(self) -> dict[str, Any]:
        return {"schema": "robfair.theory-lab/1", "setting": self.setting, "rows": self.rows,
                "classifiers": self.classifiers}


def gaussian_lab(d: int = 50, eta: float = 0.1, K: float = 2.0, eps: float = 0.05, *, sigma: float = 1.0,
                 n: int = 20_000, n_test: int | None = None, seed: int = 0,
                 group_sizes: Sequence[float] = (1.0,), group_scales: Sequence[float] = (1.0,),
                 norm: str = "linf", threshold: str = "logistic") -> LabResult:
    """Closed form vs trained vs Monte Carlo on the spec section 4 mixture (optionally with groups).

    Trains on ``n`` samples: the natural linear classifier (logistic regression) and the robust one
    (adversarial training with the exact inner maximization, radius ``eps``), then reports per
    (group, class) the standard and robust error of (a) the optimal classifiers of spec section 4
    (closed form), (b) the trained classifiers (exact, from their w and b), (c) the trained
    classifiers on ``n_test`` fresh samples (Monte Carlo, Wilson 95% interval).

    ``threshold``: ``logistic`` keeps the trained bias; ``01`` refits it to minimize the empirical
    (robust, for the robust model) 0-1 error on the training samples (:func:`fit_threshold`): the
    logistic loss is not the 0-1 loss, and with unequal class variances their optimal biases differ."""
    if threshold not in ("logistic", "01"):
        raise ConfigError(f"threshold must be 'logistic' or '01', got {threshold!r}")
    _check(d, eta, sigma, K, eps)
    if int(n) < 2:
        raise ConfigError(f"n must be >= 2, got {n}; pass the number of training samples, e.g. 20000")
    p, scales = _groups(group_sizes, group_scales)
    n_test = int(n if n_test is None else n_test)
    rng = np.random.default_rng(seed)
    x, y, _ = sample_group_mixture(n, d, eta, sigma, K, group_sizes=p, group_scales=scales, generator=rng)
    if len(np.unique(np.asarray(y))) < 2:
        raise ConfigError(f"the {n} training samples drawn hold only one class; pass a larger n (e.g. 20000) "
                          "or another seed")
    xt, yt, gt = sample_group_mixture(n_test, d, eta, sigma, K, group_sizes=p, group_scales=scales, generator=rng)
    models = {}
    for model, e in (("natural", 0.0), ("robust", eps)):
        w_tr, b_tr = train_linear(x, y, eps=e, norm=norm)
        if threshold == "01":
            b_tr = fit_threshold(w_tr, x, y, eps=e, norm=norm)
        models[model] = (optimal_linear_classifier(d, eta, sigma, K, e if e > 0 else None), (w_tr, b_tr))
    rows: list[dict[str, Any]] = []
    classifiers: dict[str, dict[str, Any]] = {}
    for model, ((w_opt, b_opt), (w_tr, b_tr)) in models.items():
        classifiers[model] = {"optimal": {"w": w_opt.tolist(), "b": b_opt}, "trained": {"w": w_tr.tolist(), "b": b_tr}}
        closed = group_errors(w_opt, b_opt, eta, sigma, K, eps, group_scales=scales, norm=norm)
        trained = group_errors(w_tr, b_tr, eta, sigma, K, eps, group_scales=scales, norm=norm)
        wrong = linear_robust_error(w_tr, b_tr, xt, yt, 0.0, norm)
        rob = linear_robust_error(w_tr, b_tr, xt, yt, eps, norm)
        for gi in range(p.size):
            for cls, key in ((-1, "neg"), (1, "pos")):
                m = (gt == gi) & (yt == cls)
                row: dict[str, Any] = {"model": model, "group": gi, "cls": cls, "n_test": int(m.sum())}
                for metric, flags in (("std_err", wrong), ("rob_err", rob)):
                    k = int(flags[m].sum())
                    lo, hi = wilson(k, int(m.sum()))
                    row[f"{metric}_closed"] = float(getattr(closed[gi][metric], key))
                    row[f"{metric}_trained"] = float(getattr(trained[gi][metric], key))
                    row[f"{metric}_mc"] = k / m.sum() if m.sum() else math.nan
                    row[f"{metric}_mc_lo"], row[f"{metric}_mc_hi"] = lo, hi
                rows.append(row)
    setting = {"d": int(d), "eta": eta, "sigma": sigma, "K": K, "eps": eps, "n": int(n), "n_test": n_test,
               "seed": seed, "group_sizes": p.tolist(), "group_scales": scales.tolist(), "norm": norm,
               "threshold": threshold}
    return LabResult(setting=setting, rows=rows, classifiers=classifiers)
