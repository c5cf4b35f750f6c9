"""Statistics of robfair in one place, all computed from exact integer counts: no torch, no scipy import.

- :func:`wilson`: Wilson score interval of k successes out of n (vectorized);
- :func:`chi2_sf`, :func:`chi2_contingency`: the chi-square test of independence, equal to
  ``scipy.stats.chi2_contingency`` (Yates' correction at one degree of freedom);
- :func:`stratified_bootstrap`: the exact stratified bootstrap of the worst group, the gap and the
  average of every rate, from each group's outcome-category counts (multinomial draws);
- :func:`dafa_rho`: DAFA's rho, relative worst plus relative average improvement over a baseline.

Users: :class:`~robfair.metrics.report.GroupReport` (by-group intervals, ``bootstrap``, ``chi2``,
``rho``), ``report.tables`` (leaderboard rho, intervals of averages), ``report.html``, ``certify``,
``experiments.compare`` (Wilson; its z-test, Newcombe interval, Holm correction and two-run bootstrap
still live in ``compare.py``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import ConfigError, DataError

__all__ = ["wilson", "chi2_sf", "chi2_contingency", "stratified_bootstrap", "dafa_rho", "RATES"]

#: the five rates of spec section 1, in display order (those the bootstrap covers)
RATES = ("clean_acc", "rob_acc", "std_err", "bndy_err", "rob_err")
#: rates where larger is better (the "worst" group is the minimum)
_HIGHER_IS_BETTER = {"clean_acc", "rob_acc", "adv_acc"}


def chi2_sf(stat: float, dof: int) -> float:
    """P[chi2_dof >= stat]: the regularized upper incomplete gamma Q(dof/2, stat/2), by its series
    below a + 1 and Lentz's continued fraction above (Numerical Recipes 6.2), to ~1e-14 relative;
    no scipy import (``scipy.special`` alone cost a CLI audit a noticeable share of its start-up)."""
    a, x = 0.5 * dof, 0.5 * float(stat)
    if x <= 0:
        return 1.0
    if not math.isfinite(x):
        return 0.0
    log_front = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1:  # series for P(a, x); Q = 1 - P is not small here
        term = total = 1.0 / a
        ap = a
        for _ in range(10_000):
            ap += 1
            term *= x / ap
            total += term
            if abs(term) < abs(total) * 1e-16:
                break
        return max(0.0, 1.0 - total * math.exp(log_front))
    tiny = 1e-300  # continued fraction for Q(a, x), modified Lentz
    b = x + 1 - a
    c, d = 1 / tiny, 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-16:
            break
    return math.exp(log_front) * h


def chi2_contingency(table: Any, correction: bool = True) -> tuple[float, float, int, np.ndarray]:
    """``scipy.stats.chi2_contingency`` for a 2-D table of counts, with the same results (Yates'
    correction when dof is 1) and no scipy import (``scipy.stats`` cost every CLI audit seconds of
    start-up). Expected counts must be positive."""
    observed = np.asarray(table, dtype=np.float64)
    expected = np.outer(observed.sum(1), observed.sum(0)) / observed.sum()
    dof = int((observed.shape[0] - 1) * (observed.shape[1] - 1))
    if dof == 0:
        return 0.0, 1.0, 0, expected
    if dof == 1 and correction:
        diff = expected - observed
        observed = observed + np.minimum(0.5, np.abs(diff)) * np.sign(diff)
    stat = float(((observed - expected) ** 2 / expected).sum())
    return stat, chi2_sf(stat, dof), dof, expected


def wilson(k: Any, n: Any, z: float = 1.96) -> tuple[Any, Any]:
    """Wilson score interval for k successes out of n (vectorized; ``n == 0`` gives ``(nan, nan)``).

    Returns ``(lo, hi)`` as floats for scalar input, arrays otherwise. ``z = 1.96`` is 95%."""
    k_arr = np.asarray(k, dtype=float)
    n_arr = np.asarray(n, dtype=float)
    if np.any(k_arr < 0) or np.any(k_arr > n_arr):
        raise DataError("wilson needs 0 <= k <= n; pass success counts and sample counts")
    with np.errstate(divide="ignore", invalid="ignore"):
        p = k_arr / n_arr
        denom = 1.0 + z * z / n_arr
        center = (p + z * z / (2 * n_arr)) / denom
        half = z / denom * np.sqrt(p * (1 - p) / n_arr + z * z / (4 * n_arr * n_arr))
        lo = np.where(n_arr > 0, np.clip(center - half, 0.0, 1.0), np.nan)
        hi = np.where(n_arr > 0, np.clip(center + half, 0.0, 1.0), np.nan)
    if lo.ndim == 0:
        return float(lo), float(hi)
    return lo, hi


def _safe_ratio(a: float, b: float) -> float:
    return float(a / b) if b != 0 and np.isfinite(a) and np.isfinite(b) else math.nan


def dafa_rho(worst: float, worst_base: float, avg: float, avg_base: float) -> float:
    """DAFA's rho = (worst - worst_base)/worst_base + (avg - avg_base)/avg_base; positive means better
    than the baseline. NaN when a baseline value is 0 or any value is not finite."""
    return _safe_ratio(worst - worst_base, worst_base) + _safe_ratio(avg - avg_base, avg_base)


def stratified_bootstrap(cats: Any, n: int = 1000, seed: int = 0, level: float = 0.95) -> dict[str, Any]:
    """Stratified bootstrap (resample each group's samples with replacement) of the worst group,
    the gap and the average, for every rate in :data:`RATES`.

    ``cats`` is a (G, 4) array of counts of each group's outcome categories (clean, adv) in
    {11, 10, 01, 00} (``Counts.categories(axis=1)``); groups without samples are dropped. Exact from
    the counts: resampling the n_g samples of group g is a multinomial draw over its categories. For
    each statistic: ``plug_in`` (the observed value), ``mean`` of the replicates, ``bias`` = mean -
    plug_in, ``corrected`` = plug_in - bias (the plug-in worst group is biased: the extreme of noisy
    estimates), and the percentile interval ``lo``/``hi``. ``worst_group_stability`` is the share of
    replicates whose worst group is the observed one."""
    n_boot = int(n)
    if n_boot < 1:
        raise ConfigError(f"bootstrap n must be >= 1, got {n}; pass e.g. n=1000")
    if not 0 < level < 1:
        raise ConfigError(f"level must be in (0, 1), got {level}; pass e.g. 0.95")
    cats = np.asarray(cats)
    if cats.ndim != 2 or cats.shape[1] != 4 or (cats < 0).any():
        raise DataError("stratified_bootstrap needs a (groups, 4) array of non-negative category counts; "
                        "pass Counts.categories(axis=1)")
    ng = cats.sum(1)
    keep = ng > 0
    cats, ng = cats[keep], ng[keep]
    result: dict[str, Any] = {"n": n_boot, "seed": int(seed), "level": float(level), "metrics": {}}
    if ng.size == 0:
        return result
    p = cats / ng[:, None]
    rng = np.random.Generator(np.random.PCG64(seed))
    chunk = max(1, 2_000_000 // (4 * ng.size))
    draws = np.concatenate(
        [rng.multinomial(ng, p, size=(min(chunk, n_boot - s), ng.size)) for s in range(0, n_boot, chunk)]
    )  # (B, G', 4): counts of 11, 10, 01, 00
    n11, n10 = draws[..., 0], draws[..., 1]
    boot_counts = {"clean_acc": n11 + n10, "rob_acc": n11, "std_err": ng - n11 - n10,
                   "bndy_err": n10, "rob_err": ng - n11}
    obs_counts = {"clean_acc": cats[:, 0] + cats[:, 1], "rob_acc": cats[:, 0],
                  "std_err": cats[:, 2] + cats[:, 3], "bndy_err": cats[:, 1], "rob_err": cats[:, 1] + cats[:, 2] + cats[:, 3]}
    alpha = (1 - level) / 2
    for metric in RATES:
        hib = metric in _HIGHER_IS_BETTER
        rates = boot_counts[metric] / ng  # (B, G')
        obs = obs_counts[metric] / ng
        worst_fn = np.min if hib else np.max
        stats = {
            "worst": (worst_fn(rates, axis=1), worst_fn(obs)),
            "gap": (np.ptp(rates, axis=1), np.ptp(obs)),
            "avg": (boot_counts[metric].sum(1) / ng.sum(), obs_counts[metric].sum() / ng.sum()),
        }
        m: dict[str, Any] = {}
        for name, (rep, plug) in stats.items():
            mean = float(rep.mean())
            bias = mean - float(plug)
            lo, hi = np.quantile(rep, [alpha, 1 - alpha])
            m[name] = {"plug_in": float(plug), "mean": mean, "bias": bias, "corrected": float(plug) - bias,
                       "lo": float(lo), "hi": float(hi)}
        arg = np.argmin if hib else np.argmax
        m["worst_group_stability"] = float((arg(rates, axis=1) == arg(obs)).mean())
        result["metrics"][metric] = m
    return result
