"""Statistics of robfair in one place, all computed from exact integer counts: no torch, and scipy only
inside the Clopper-Pearson bounds (beta quantiles; importing ``scipy.stats`` costs seconds of start-up).

Intervals and tests of one rate or one table:

- :func:`wilson`: Wilson score interval of k successes out of n (vectorized);
- :func:`cp_lower`, :func:`cp_upper`: one-sided Clopper-Pearson bounds (randomized smoothing's
  certified radius, ``robfair.certify``);
- :func:`chi2_sf`, :func:`chi2_contingency`: the chi-square test of independence, equal to
  ``scipy.stats.chi2_contingency`` (Yates' correction at one degree of freedom);
- :func:`finite_population_bounds`: anytime-valid one-sided bounds on the marked items of a finite
  population from a random prefix drawn without replacement (the reliability probe's per-group
  statements, valid under its adaptive rounds);

Two runs or two attacks on the same classes:

- :func:`two_proportion_test`: the pooled two-proportion z-test (independent samples);
- :func:`newcombe_interval`: Newcombe's hybrid score interval of a difference of two proportions
  (independent samples);
- :func:`mcnemar_exact`: the exact McNemar test (binomial at 1/2 on the discordant pairs),
  two-sided or one-sided, for paired per-sample outcomes (and the two-sided binomial test at 1/2
  of certify's PREDICT);
- :func:`tango_interval`, :func:`paired_interval`: Tango's score interval of a difference of paired
  proportions, and that interval made to agree with the exact McNemar test (the one ``compare``
  shows beside it; its rare cut at 0 takes a Clopper-Pearson bound, so scipy);
- :func:`holm`, :func:`holm_levels`: Holm's step-down adjustment of a family of p-values, and the
  level at which the step-down tested each hypothesis;

Resampling:

- :func:`bootstrap_counts`: multinomial replicates of every rate's per-group counts from each
  group's outcome-category counts (the exact stratified bootstrap);
- :func:`stratified_bootstrap`: its summary for the worst group, the gap and the average;
- :func:`dafa_rho`: DAFA's rho, relative worst plus relative average improvement over a baseline.

Users: :class:`~robfair.metrics.groups.GroupReport` (by-group intervals, ``bootstrap``, ``chi2``,
``rho``), ``report.tables`` (leaderboard rho, intervals of averages), ``report.html``, ``certify``,
``experiments.compare`` (every test and interval of a comparison) and ``audit.probe_design`` (the
reliability probe's bounds).
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

import numpy as np

from ..errors import ConfigError, DataError

__all__ = ["wilson", "cp_lower", "cp_upper", "finite_population_bounds", "chi2_sf", "chi2_contingency", "two_proportion_test", "newcombe_interval", "mcnemar_exact",
           "binom_half_cdf", "tango_interval", "paired_interval", "holm", "holm_levels", "bootstrap_counts",
           "stratified_bootstrap", "dafa_rho", "RATES"]

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


def two_proportion_test(k1: int, n1: int, k2: int, n2: int) -> tuple[float, float]:
    """(z, two-sided p) of the pooled two-proportion z-test of p2 - p1 (independent samples);
    (0, 1) when undefined (an empty sample, or both proportions 0 or both 1)."""
    if n1 == 0 or n2 == 0:
        return 0.0, 1.0
    p = (k1 + k2) / (n1 + n2)
    se = math.sqrt(p * (1 - p) * (1 / n1 + 1 / n2))
    if se == 0:
        return 0.0, 1.0
    z = (k2 / n2 - k1 / n1) / se
    return float(z), float(math.erfc(abs(z) / math.sqrt(2)))  # 2 * P[N(0,1) > |z|]


def newcombe_interval(k1: int, n1: int, k2: int, n2: int, z: float = 1.96) -> tuple[float, float]:
    """Interval of p2 - p1 by Newcombe's hybrid score method (his method 10, from the two Wilson
    intervals; ``z = 1.96`` is 95%); (nan, nan) when a sample is empty."""
    if n1 == 0 or n2 == 0:
        return math.nan, math.nan
    p1, p2 = k1 / n1, k2 / n2
    l1, u1 = wilson(k1, n1, z)
    l2, u2 = wilson(k2, n2, z)
    d = p2 - p1
    return d - math.sqrt((p2 - l2) ** 2 + (u1 - p1) ** 2), d + math.sqrt((u2 - p2) ** 2 + (p1 - l1) ** 2)


def binom_half_cdf(k: int, n: int) -> float:
    """P[X <= k] for X ~ Binomial(n, 1/2), summed term by term from C(n, k) / 2^n downwards (no
    overflow, relative error ~1e-15 below the median)."""
    k, n = int(k), int(n)
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    if 2 * k >= n:  # above the median: the complement, whose terms fall off
        return 1.0 - binom_half_cdf(n - k - 1, n)
    log_top = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) - n * math.log(2.0)
    total, term = 1.0, 1.0
    for i in range(k, 0, -1):  # C(n, i - 1) / C(n, i) = i / (n - i + 1)
        term *= i / (n - i + 1)
        total += term
        if term < total * 1e-17:
            break
    return min(1.0, math.exp(log_top) * total)


def mcnemar_exact(b: int, c: int, alternative: str = "two-sided") -> float:
    """Exact McNemar p-value from the discordant counts of paired outcomes: ``b`` pairs where only
    the first event happened, ``c`` where only the second did; under the null each discordant pair
    goes either way with probability 1/2. ``alternative``: ``"two-sided"`` (equal to
    ``scipy.stats.binomtest(b, b + c, 0.5).pvalue``) or ``"greater"`` (``b`` exceeds chance). 1
    when there is no discordant pair."""
    b, c = int(b), int(c)
    if b < 0 or c < 0:
        raise DataError(f"discordant counts must be >= 0, got b={b}, c={c}")
    n = b + c
    if n == 0:
        return 1.0
    if alternative == "greater":
        return binom_half_cdf(c, n)  # P[X >= b] = P[n - X <= c]
    if alternative != "two-sided":
        raise ConfigError(f"alternative must be 'two-sided' or 'greater', got {alternative!r}")
    return 1.0 if b == c else min(1.0, 2.0 * binom_half_cdf(min(b, c), n))


def _tango_z(b: int, c: int, n: int, d0: float) -> float:
    """Tango's score statistic of H0: p2 - p1 = d0 for paired outcomes (``b`` pairs with the event in
    the first only, ``c`` in the second only, ``n`` pairs): (c - b - n d0) / sqrt(n (2 q + d0 (1 - d0))),
    q the maximum-likelihood P[first only] under H0, the positive root of
    2n q^2 + W q - b d0 (1 - d0) = 0 with W = -b - c + (2n - c + b) d0."""
    w = -b - c + (2 * n - c + b) * d0
    cst = b * d0 * (1 - d0)
    disc = math.sqrt(max(w * w + 8 * n * cst, 0.0))
    q = (disc - w) / (4 * n) if w <= 0 else 2 * cst / (disc + w)  # the same root, without cancellation
    num = c - b - n * d0
    var = n * (2 * q + d0 * (1 - d0))
    if var <= 0:
        return 0.0 if num == 0 else math.copysign(math.inf, num)
    return num / math.sqrt(var)


def tango_interval(b: int, c: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Tango's (1998) score interval, at level 1 - alpha, of the difference p2 - p1 of two paired
    proportions, from the discordant counts (``b``: the event in the first only, ``c``: in the second
    only) of ``n`` pairs: every d0 whose score statistic :func:`_tango_z` has |z| <= z_{1 - alpha/2}
    (its endpoints by bisection to 1e-15). It accounts for the pairing (the concordant pairs carry no
    information about the difference, the discordant ones do), unlike :func:`newcombe_interval`.
    At d0 = 0 the statistic is (c - b) / sqrt(b + c), the uncorrected McNemar statistic. (nan, nan)
    when ``n`` is 0."""
    b, c, n = int(b), int(c), int(n)
    if b < 0 or c < 0 or b + c > n:
        raise DataError(f"paired counts need 0 <= b, c and b + c <= n, got b={b}, c={c}, n={n}")
    check_alpha(alpha)
    if n == 0:
        return math.nan, math.nan
    zc = NormalDist().inv_cdf(1 - float(alpha) / 2)
    est = (c - b) / n
    ends = []
    for outer, sign in ((-1.0, 1.0), (1.0, -1.0)):  # lower end: z falls from +inf at -1 to 0 at est
        if est == outer:
            ends.append(outer)
            continue
        out, inside = outer, est  # sign * (z - zc) > 0 at `out` (the statistic is infinite at +-1), <= 0 inside
        while abs(inside - out) > 1e-15:
            mid = 0.5 * (out + inside)
            if sign * _tango_z(b, c, n, mid) > zc:
                out = mid
            else:
                inside = mid
        ends.append(inside)
    return ends[0], ends[1]


def paired_interval(b: int, c: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """The interval of a paired difference p2 - p1 that agrees with the exact McNemar test
    (:func:`mcnemar_exact`, two-sided) at level ``alpha``: it excludes 0 exactly when that test
    rejects (p < alpha). ``b``, ``c``, ``n`` as in :func:`tango_interval`.

    It is Tango's score interval (:func:`tango_interval`), which accounts for the pairing, with the
    test of "no difference" replaced by the exact one:

    - the exact test does not reject but the score test does (its statistic at 0 is the uncorrected
      McNemar statistic, which rejects more readily): the interval is stretched to reach 0, the
      smallest interval holding every difference neither test rejects; stretching only widens it;
    - the exact test rejects but the score interval holds 0: this needs a binomial tail below the
      normal one, which happens only far out in the tail (p < 5.4e-4 for every table up to 3000
      discordant pairs, e.g. 0 of 12 pairs flipping back), so at the small levels of a Holm step over
      about 100 classes. The end on the far side of 0 is then the exact conditional bound
      (b + c) / n * (1 - 2 u), u the Clopper-Pearson upper (1 - alpha/2) bound on the share of the
      discordant pairs that went against the estimate; u < 1/2 exactly when the exact test rejects,
      so that end lies strictly between 0 and the estimate.

    (nan, nan) when ``n`` is 0."""
    lo, hi = tango_interval(b, c, n, alpha)
    if not n:
        return lo, hi
    b, c = int(b), int(c)
    if not mcnemar_exact(b, c) < alpha:
        return min(lo, 0.0), max(hi, 0.0)
    if lo <= 0.0 <= hi:  # a rejection has b != c, so the estimate has a side
        nd = b + c
        end = nd / n * (1 - 2 * float(cp_upper(min(b, c), nd, alpha / 2)))
        end = max(end, math.ulp(0.0))  # positive in exact arithmetic; never let rounding put it on 0
        lo, hi = (end, hi) if c > b else (lo, -end)
    return lo, hi

def holm(pvalues: Any) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error), in the order given."""
    p = [float(x) for x in pvalues]
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out



def holm_levels(pvalues: Any, alpha: float) -> list[float]:
    """The level at which Holm's step-down procedure at family-wise ``alpha`` tests each hypothesis, in
    the order given: the r-th smallest p-value (r = 0, 1, ...) is tested at alpha / (m - r) while every
    smaller one was rejected; the procedure stops at the first p-value that is not below its level, and
    that level, alpha / (m - s), is the one of every hypothesis not rejected. So hypothesis i is
    rejected exactly when p_i < level_i, and an interval at level 1 - level_i excludes the null exactly
    when its test (at level_i) rejects: intervals that agree with Holm's decisions."""
    check_alpha(alpha)
    p = [float(x) for x in pvalues]
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out = [0.0] * m
    stopped = None
    for rank, i in enumerate(order):
        if stopped is None and not p[i] < alpha / (m - rank):
            stopped = rank
        out[i] = alpha / (m - (rank if stopped is None else stopped))
    return out


def check_alpha(alpha: float) -> None:
    """A one-line ConfigError unless 0 < alpha < 1."""
    if not (isinstance(alpha, (int, float, np.floating)) and 0 < float(alpha) < 1):
        raise ConfigError(f"alpha must be in (0, 1), got {alpha!r}; pass e.g. 0.001")


def cp_lower(k: Any, n: Any, alpha: float) -> np.ndarray | float:
    """One-sided Clopper-Pearson lower confidence bound at level 1 - alpha on a binomial proportion
    from k successes in n trials: the alpha quantile of Beta(k, n - k + 1), and 0 for k = 0."""
    from scipy.stats import beta  # lazy: start-up time (scipy.stats takes seconds; only certify needs it)

    check_alpha(alpha)
    k_a, n_a = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    if np.any(k_a < 0) or np.any(k_a > n_a) or np.any(n_a < 1):
        raise DataError("cp_lower needs 0 <= k <= n and n >= 1; pass success counts and trial counts")
    with np.errstate(invalid="ignore"):
        out = np.where(k_a > 0, beta.ppf(alpha, np.maximum(k_a, 1), n_a - k_a + 1), 0.0)
    return float(out) if out.ndim == 0 else out


def cp_upper(k: Any, n: Any, alpha: float) -> np.ndarray | float:
    """One-sided Clopper-Pearson upper bound: the 1 - alpha quantile of Beta(k + 1, n - k), 1 for k = n."""
    from scipy.stats import beta  # lazy: start-up time (scipy.stats takes seconds; certify and paired_interval's rare cut)

    check_alpha(alpha)
    k_a, n_a = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore"):
        out = np.where(k_a < n_a, beta.ppf(1 - alpha, k_a + 1, np.maximum(n_a - k_a, 1)), 1.0)
    return float(out) if out.ndim == 0 else out


def _log_factorials(n: int) -> np.ndarray:
    """``log(i!)`` for i = 0..n (a cumulative sum of logs: no scipy)."""
    return np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n + 1, dtype=np.float64)))])


def finite_population_bounds(k: int, t: int, size: int, alpha_lower: float | None,
                             alpha_upper: float | None) -> tuple[int, int]:
    """Anytime-valid one-sided confidence bounds ``(lower, upper)`` on ``D``, the number of marked
    items in a population of ``size``, from the first ``t`` items of a uniformly random order of it,
    ``k`` of them marked (sampling without replacement).

    Each bound comes from a mixture likelihood-ratio martingale (the prior-posterior ratio of
    Waudby-Smith & Ramdas, "Confidence sequences for sampling without replacement", NeurIPS 2020),
    made one-sided: a value ``d`` is below the lower bound when the likelihood of the draws averaged
    over the alternatives ``D' > d`` (uniform weights) is at least ``1 / alpha_lower`` times their
    likelihood under ``d``; the upper bound mirrors it over ``D' < d``. Under the true ``D`` that
    ratio is a nonnegative martingale with mean 1, so by Ville's inequality
    ``P(lower > D for some t) <= alpha_lower`` and ``P(upper < D for some t) <= alpha_upper``:
    the bounds hold **uniformly over t**, so the number of draws may depend on what earlier draws
    showed (a sequential or adaptive design), and bounds taken at several times may be intersected.

    ``lower >= k`` and ``upper <= size - (t - k)`` always (the draws themselves); with every item
    drawn (``t == size``) both equal ``k``. ``alpha_*`` None: that side is not bounded (``k``,
    respectively ``size - (t - k)``)."""
    k, t, size = int(k), int(t), int(size)
    if not 0 <= k <= t <= size:
        raise DataError(f"finite_population_bounds needs 0 <= k <= t <= size, got k={k}, t={t}, size={size}")
    for a in (alpha_lower, alpha_upper):
        if a is not None:
            check_alpha(a)
    lo_min, hi_max = k, size - (t - k)  # what the draws themselves show
    if t == 0 or t == size:  # nothing drawn, or everything: no statistics
        return lo_min, hi_max
    lf = _log_factorials(size)
    d = np.arange(lo_min, hi_max + 1)
    # log P(these draws | D = d), up to a constant in d: [d]_k [size - d]_(t-k)
    log_l = lf[d] - lf[d - k] + lf[size - d] - lf[size - d - (t - k)]
    c = log_l.max()
    w = np.exp(log_l - c)
    lower, upper = lo_min, hi_max
    with np.errstate(divide="ignore"):
        if alpha_lower is not None:
            above = np.concatenate([np.cumsum(w[::-1])[::-1][1:], [0.0]])  # sum over D' > d of L(D') (D' <= hi_max)
            n_alt = size - d  # uniform weights over d < D' <= size (D' > hi_max have likelihood 0)
            log_m = np.log(above) + c - log_l - np.log(np.maximum(n_alt, 1))
            keep = (log_m < math.log(1.0 / alpha_lower)) | (n_alt == 0)
            lower = int(d[np.argmax(keep)]) if keep.any() else hi_max
        if alpha_upper is not None:
            below = np.concatenate([[0.0], np.cumsum(w)[:-1]])  # sum over lo_min <= D' < d
            log_m = np.log(below) + c - log_l - np.log(np.maximum(d, 1))  # uniform over 0 <= D' < d
            keep = (log_m < math.log(1.0 / alpha_upper)) | (d == 0)
            upper = int(d[len(d) - 1 - np.argmax(keep[::-1])]) if keep.any() else lo_min
    return lower, upper


def _safe_ratio(a: float, b: float) -> float:
    return float(a / b) if b != 0 and np.isfinite(a) and np.isfinite(b) else math.nan


def dafa_rho(worst: float, worst_base: float, avg: float, avg_base: float) -> float:
    """DAFA's rho = (worst - worst_base)/worst_base + (avg - avg_base)/avg_base; positive means better
    than the baseline. NaN when a baseline value is 0 or any value is not finite."""
    return _safe_ratio(worst - worst_base, worst_base) + _safe_ratio(avg - avg_base, avg_base)


def _categories(cats: Any, who: str) -> np.ndarray:
    cats = np.asarray(cats)
    if cats.ndim != 2 or cats.shape[1] != 4 or (cats < 0).any():
        raise DataError(f"{who} needs a (groups, 4) array of non-negative category counts; "
                        "pass Counts.categories(axis=1)")
    return cats


def bootstrap_counts(cats: Any, n_boot: int, rng: np.random.Generator) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """``(counts, n)``: ``n_boot`` stratified bootstrap replicates of every rate's per-group event
    counts (``counts[rate]`` of shape (B, G') for each rate of :data:`RATES`) and the group sizes
    ``n`` (G',), from ``cats``, the (G, 4) counts of each group's outcome categories (clean, adv) in
    {11, 10, 01, 00} (``Counts.categories(axis=1)``); groups without samples are dropped. Exact from
    the counts: resampling the n_g samples of group g is a multinomial draw over its categories
    (drawn from ``rng`` in chunks of replicates, the same stream as one draw)."""
    cats = _categories(cats, "bootstrap_counts")
    ng = cats.sum(1)
    cats, ng = cats[ng > 0], ng[ng > 0]
    n_boot = int(n_boot)
    if ng.size == 0:
        return {r: np.zeros((n_boot, 0), dtype=np.int64) for r in RATES}, ng
    p = cats / ng[:, None]
    chunk = max(1, 2_000_000 // (4 * ng.size))
    draws = np.concatenate(
        [rng.multinomial(ng, p, size=(min(chunk, n_boot - s), ng.size)) for s in range(0, n_boot, chunk)]
    )  # (B, G', 4): counts of 11, 10, 01, 00
    n11, n10 = draws[..., 0], draws[..., 1]
    return {"clean_acc": n11 + n10, "rob_acc": n11, "std_err": ng - n11 - n10, "bndy_err": n10,
            "rob_err": ng - n11}, ng


def stratified_bootstrap(cats: Any, n: int = 1000, seed: int = 0, level: float = 0.95) -> dict[str, Any]:
    """Stratified bootstrap (resample each group's samples with replacement) of the worst group,
    the gap and the average, for every rate in :data:`RATES`.

    ``cats`` is a (G, 4) array of counts of each group's outcome categories (clean, adv) in
    {11, 10, 01, 00} (``Counts.categories(axis=1)``); groups without samples are dropped. Exact from
    the counts (:func:`bootstrap_counts`). For each statistic: ``plug_in`` (the observed value), ``mean`` of the replicates, ``bias`` = mean -
    plug_in, ``corrected`` = plug_in - bias (the plug-in worst group is biased: the extreme of noisy
    estimates), and the percentile interval ``lo``/``hi``. ``worst_group_stability`` is the share of
    replicates whose worst group is the observed one."""
    n_boot = int(n)
    if n_boot < 1:
        raise ConfigError(f"bootstrap n must be >= 1, got {n}; pass e.g. n=1000")
    if not 0 < level < 1:
        raise ConfigError(f"level must be in (0, 1), got {level}; pass e.g. 0.95")
    result: dict[str, Any] = {"n": n_boot, "seed": int(seed), "level": float(level), "metrics": {}}
    cats = _categories(cats, "stratified_bootstrap")
    cats = cats[cats.sum(1) > 0]
    if cats.shape[0] == 0:
        return result
    boot_counts, ng = bootstrap_counts(cats, n_boot, np.random.Generator(np.random.PCG64(seed)))
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
