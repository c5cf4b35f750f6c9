"""The reliability probe's bounds: anytime-valid one-sided confidence bounds on the number of marked
items of a finite population, from a random prefix drawn without replacement
(``robfair.metrics.stats.finite_population_bounds``)."""

from __future__ import annotations

from fractions import Fraction
from math import comb

import numpy as np
import pytest

from robfair.errors import DataError
from robfair.metrics.stats import finite_population_bounds


def brute_force(k: int, t: int, size: int, alpha: float) -> tuple[int, int]:
    """The bounds from their definition, in exact rational arithmetic: d is below the lower bound
    when the likelihood of the draws averaged uniformly over D' in (d, size] is >= 1/alpha times
    its likelihood at d (mirrored over [0, d) for the upper bound)."""
    like = [Fraction(comb(d, k) * comb(size - d, t - k)) for d in range(size + 1)]
    thresh = 1 / Fraction(alpha).limit_denominator(10**9)
    lower = next(d for d in range(size + 1)
                 if like[d] > 0 and (d == size or sum(like[d + 1:]) / (size - d) / like[d] < thresh))
    upper = next(d for d in range(size, -1, -1)
                 if like[d] > 0 and (d == 0 or sum(like[:d]) / d / like[d] < thresh))
    return lower, upper


@pytest.mark.parametrize("k,t,size", [(0, 10, 40), (3, 10, 40), (7, 12, 30), (12, 12, 50), (1, 25, 25),
                                      (5, 20, 200), (0, 1, 5), (2, 2, 3)])
@pytest.mark.parametrize("alpha", [0.05, 0.0025])
def test_equals_its_definition(k, t, size, alpha):
    assert finite_population_bounds(k, t, size, alpha, alpha) == brute_force(k, t, size, alpha)


def test_one_sided_each_side_spends_its_own_alpha():
    """The lower bound at alpha is the one-sided bound at alpha, not a two-sided interval's lower
    end (which spends alpha / 2 per side and gives less): a flag built on it would lose power."""
    k, t, size, alpha = 20, 100, 500, 0.005
    lo, _ = finite_population_bounds(k, t, size, alpha, None)
    lo_half, _ = finite_population_bounds(k, t, size, alpha / 2, None)
    like = np.array([comb(d, k) * comb(size - d, t - k) for d in range(size + 1)], dtype=float)
    two_sided = int(np.argmax(like > alpha / 2 * like.mean()))  # prior-posterior ratio set, uniform prior, alpha/2
    assert (lo, lo_half, two_sided) == (45, 44, 43)
    _, hi = finite_population_bounds(k, t, size, None, alpha)
    _, hi_half = finite_population_bounds(k, t, size, None, alpha / 2)
    assert hi < hi_half


def test_draws_bound_it_and_a_census_is_exact():
    assert finite_population_bounds(0, 0, 30, 0.05, 0.05) == (0, 30)
    assert finite_population_bounds(4, 30, 30, 0.05, 0.05) == (4, 4)
    lo, hi = finite_population_bounds(4, 10, 30, 0.05, 0.05)
    assert 4 <= lo and hi <= 30 - 6
    assert finite_population_bounds(4, 10, 30, None, None) == (4, 24)
    with pytest.raises(DataError, match="k <= t <= size"):
        finite_population_bounds(5, 4, 30, 0.05, 0.05)


def test_anytime_coverage_under_optional_stopping():
    """Stop as soon as the lower bound is largest or the upper smallest (the most optimistic look,
    an adaptive design's worst case): each side still misses at most alpha of the time."""
    rng = np.random.default_rng(0)
    size, marked, alpha, reps = 120, 18, 0.2, 300
    miss_lo = miss_hi = 0
    for _ in range(reps):
        pop = np.zeros(size, dtype=bool)
        pop[:marked] = True
        rng.shuffle(pop)
        c = np.cumsum(pop)
        los, his = zip(*(finite_population_bounds(int(c[t - 1]), t, size, alpha, alpha) for t in range(1, size, 3)))
        miss_lo += max(los) > marked
        miss_hi += min(his) < marked
    bound = alpha + 3 * (alpha * (1 - alpha) / reps) ** 0.5
    assert miss_lo / reps <= bound and miss_hi / reps <= bound
    assert miss_lo + miss_hi > 0  # not vacuous: the looks do come close
