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
- :func:`sample_gaussian_mixture` - draws from the mixture.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
from scipy.special import ndtr  # standard normal CDF

from .errors import ConfigError, DataError

__all__ = [
    "PerClass",
    "gaussian_mixture_errors",
    "optimal_linear_classifier",
    "linear_classifier_errors",
    "linear_robust_error",
    "dual_norm",
    "sample_gaussian_mixture",
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
