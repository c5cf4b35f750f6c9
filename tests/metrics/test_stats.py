"""robfair.metrics.stats against closed forms, published examples and scipy: Wilson, chi-square, the
two-proportion z-test, Newcombe's interval, the exact McNemar test, Tango's paired interval and its agreement
with the exact test, Holm and its levels, the stratified bootstrap, DAFA's rho."""

from __future__ import annotations

import math

import numpy as np
import pytest

from robfair.errors import ConfigError, DataError
from robfair.metrics import GroupReport
from robfair.metrics.stats import (binom_half_cdf, bootstrap_counts, chi2_contingency, dafa_rho, holm, holm_levels,
                                   mcnemar_exact, newcombe_interval, paired_interval, stratified_bootstrap, tango_interval,
                                   two_proportion_test, wilson)


@pytest.mark.parametrize("k,n", [(0, 10), (3, 10), (10, 10), (517, 1000), (1, 1)])
def test_wilson_equals_scipy_and_closed_form(k, n):
    from scipy.stats import binomtest, norm

    lo, hi = wilson(k, n, z=float(norm.ppf(0.975)))
    ref = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    assert (lo, hi) == pytest.approx((ref.low, ref.high), abs=1e-12)
    z = 1.96
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert wilson(k, n) == pytest.approx((max(0.0, centre - half), min(1.0, centre + half)), abs=1e-12)


def test_wilson_vectorized_empty_and_bad():
    lo, hi = wilson(np.array([0, 2, 5]), np.array([0, 4, 5]))
    assert math.isnan(lo[0]) and math.isnan(hi[0])
    assert lo[1] < 0.5 < hi[1] and hi[2] == 1.0
    with pytest.raises(DataError):
        wilson(6, 5)


def test_chi2_equals_scipy():
    from scipy.stats import chi2_contingency as ref

    for table in ([[10, 20], [30, 5]], [[3, 7, 9], [12, 1, 4], [5, 5, 5]]):
        stat, p, dof, expected = chi2_contingency(table)
        r = ref(np.asarray(table))
        assert stat == pytest.approx(r[0], rel=1e-10) and p == pytest.approx(r[1], rel=1e-8) and dof == r[2]
        np.testing.assert_allclose(expected, r[3])


def test_dafa_rho_closed_form():
    assert dafa_rho(0.3, 0.2, 0.5, 0.4) == pytest.approx(0.5 + 0.25)
    assert dafa_rho(0.2, 0.2, 0.4, 0.4) == 0.0
    assert math.isnan(dafa_rho(0.3, 0.0, 0.5, 0.4)) and math.isnan(dafa_rho(0.3, 0.2, math.nan, 0.4))


def test_rho_of_report_and_leaderboard_agree_with_stats():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 4, 300)
    a = GroupReport.from_outcomes(y=y, clean_pred=y, adv_pred=np.where(rng.random(300) < 0.6, y, (y + 1) % 4),
                                  class_names=list("abcd"))
    b = GroupReport.from_outcomes(y=y, clean_pred=y, adv_pred=np.where(rng.random(300) < 0.4, y, (y + 1) % 4),
                                  class_names=list("abcd"))
    ra, rb = a.aggregates()["rob_acc"], b.aggregates()["rob_acc"]
    assert a.rho(b) == dafa_rho(ra["worst"], rb["worst"], ra["avg"], rb["avg"]) > 0


def test_bootstrap_one_group_is_the_binomial():
    """One group of n samples, k robust: the replicates of the average are Binomial(n, k/n)/n, so the
    percentile interval is the binomial's quantiles (within one sample of Monte-Carlo error)."""
    from scipy.stats import binom

    n, k = 50, 30
    cats = np.array([[k, 0, 0, n - k]])
    res = stratified_bootstrap(cats, n=20_000, seed=0)["metrics"]["rob_acc"]
    assert res["avg"]["plug_in"] == res["worst"]["plug_in"] == k / n
    assert res["avg"]["mean"] == pytest.approx(k / n, abs=0.005)
    assert res["avg"]["lo"] == pytest.approx(binom.ppf(0.025, n, k / n) / n, abs=1 / n + 1e-9)
    assert res["avg"]["hi"] == pytest.approx(binom.ppf(0.975, n, k / n) / n, abs=1 / n + 1e-9)
    assert res["gap"]["plug_in"] == 0 and res["gap"]["hi"] == 0 and res["worst_group_stability"] == 1.0


def test_bootstrap_worst_is_biased_down_and_matches_report():
    cats = np.array([[40, 10, 0, 50], [42, 8, 0, 50], [0, 0, 0, 0]])  # the empty group is dropped
    res = stratified_bootstrap(cats, n=4000, seed=7)
    m = res["metrics"]["rob_acc"]["worst"]
    assert m["plug_in"] == 0.4 and m["mean"] < m["plug_in"] and m["corrected"] > m["plug_in"]
    assert res["n"] == 4000 and res["seed"] == 7
    assert stratified_bootstrap(cats, n=4000, seed=7) == res  # seeded: reproducible
    with pytest.raises(ConfigError):
        stratified_bootstrap(cats, n=0)
    with pytest.raises(ConfigError):
        stratified_bootstrap(cats, level=1.0)
    with pytest.raises(DataError):
        stratified_bootstrap(np.ones((2, 3)))


def test_overall_counts_are_exact():
    y = np.array([0, 0, 1, 1, 1])
    rep = GroupReport.from_outcomes(y=y, clean_pred=np.array([0, 1, 1, 1, 0]), adv_pred=np.array([0, 1, 0, 1, 0]),
                                    class_names=["a", "b"])
    k = rep.overall_counts()
    assert k == {"n": 5, "clean_acc": 3, "rob_acc": 2, "std_err": 2, "bndy_err": 1, "rob_err": 3, "adv_acc": 2}
    assert all(rep.overall[m] == k[m] / 5 for m in ("clean_acc", "rob_acc", "bndy_err"))


def test_newcombe_interval_matches_published_example():
    # Newcombe (1998), Stat. Med. 17:873, method 10: 56/70 - 48/80 = 0.2000, 95% CI 0.0524 to 0.3339
    lo, hi = newcombe_interval(48, 80, 56, 70)
    assert (round(lo, 4), round(hi, 4)) == (0.0524, 0.3339)


def test_two_proportion_test_closed_form():
    from scipy.stats import norm

    z, p = two_proportion_test(50, 100, 90, 100)
    pooled = 140 / 200
    z_hand = 0.4 / math.sqrt(pooled * (1 - pooled) * (2 / 100))
    assert z == pytest.approx(z_hand) and p == pytest.approx(2 * norm.sf(z_hand))
    assert two_proportion_test(5, 10, 5, 10) == (0.0, 1.0)
    assert two_proportion_test(10, 10, 10, 10) == (0.0, 1.0)  # no variance: no evidence


def test_holm():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5]) == [0.5]


@pytest.mark.parametrize("b,c", [(0, 0), (0, 1), (1, 0), (9, 1), (3, 3), (4, 5), (0, 40), (17, 30), (120, 80),
                                 (2500, 2400), (1, 3000)])
def test_mcnemar_exact_equals_scipy_binomtest(b, c):
    from scipy.stats import binomtest

    n = b + c
    two = binomtest(b, n, 0.5).pvalue if n else 1.0
    greater = binomtest(b, n, 0.5, alternative="greater").pvalue if n else 1.0
    assert mcnemar_exact(b, c) == pytest.approx(two, rel=1e-9, abs=1e-300)
    assert mcnemar_exact(b, c, "greater") == pytest.approx(greater, rel=1e-9, abs=1e-300)
    assert mcnemar_exact(b, c) == mcnemar_exact(c, b)  # two-sided: symmetric


def _profiled_score_interval(b, c, n, alpha):
    """Tango's interval the long way, as an independent reference: for each d0 the nuisance
    q = P[first only] is maximized numerically (scipy's bounded scalar search on the multinomial
    log-likelihood, no closed form), the score statistic is formed from it, and the endpoints are
    the roots of |z(d0)| = z_{1 - alpha/2} found by Brent's method."""
    from scipy.optimize import brentq, minimize_scalar
    from scipy.stats import norm

    def z(d0):
        lo_q, hi_q = max(0.0, -d0), (1 - d0) / 2
        nll = lambda q: -(b * math.log(max(q, 1e-300)) + c * math.log(max(q + d0, 1e-300))  # noqa: E731
                          + (n - b - c) * math.log(max(1 - 2 * q - d0, 1e-300)))
        q = minimize_scalar(nll, bounds=(lo_q, hi_q), method="bounded", options={"xatol": 1e-14}).x
        num, var = c - b - n * d0, n * (2 * q + d0 * (1 - d0))
        return num / math.sqrt(var) if var > 0 else 0.0  # var = 0 only at d0 = est = +-1, where num = 0 too

    zc = norm.ppf(1 - alpha / 2)
    est = (c - b) / n
    eps = 1e-9
    lo = -1.0 if est == -1 else brentq(lambda d: z(d) - zc, -1 + eps, est, xtol=1e-13)
    hi = 1.0 if est == 1 else brentq(lambda d: z(d) + zc, est, 1 - eps, xtol=1e-13)
    return lo, hi


@pytest.mark.parametrize("b,c,n,alpha", [(1, 7, 21, 0.05), (40, 20, 160, 0.05), (0, 5, 100, 0.05), (0, 0, 10, 0.05),
                                         (3, 3, 50, 0.01), (12, 30, 300, 0.001), (0, 10, 10, 0.05), (250, 180, 10_000, 0.05),
                                         (2, 0, 7, 0.2)])
def test_tango_interval_equals_a_profiled_score_inversion(b, c, n, alpha):
    lo, hi = tango_interval(b, c, n, alpha)
    ref_lo, ref_hi = _profiled_score_interval(b, c, n, alpha)
    assert lo == pytest.approx(ref_lo, abs=2e-7) and hi == pytest.approx(ref_hi, abs=2e-7)
    assert lo <= (c - b) / n <= hi
    lo_b, hi_b = tango_interval(c, b, n, alpha)  # swapping the runs mirrors the interval
    assert (lo_b, hi_b) == pytest.approx((-hi, -lo), abs=1e-12)


def test_tango_statistic_at_zero_is_mcnemars_and_a_paired_interval_is_narrower():
    from scipy.stats import norm

    from robfair.metrics.stats import _tango_z

    assert _tango_z(3, 12, 40, 0.0) == pytest.approx(9 / math.sqrt(15), rel=1e-12)  # (c - b) / sqrt(b + c)
    # a difference of 10 points on 100 samples: runs that agree on 80 samples (5 + 15 flipped) pin it
    # down far better than 50 vs 60 of 100 treated as independent samples; runs that agree on none
    # (45 + 55 flipped) worse
    lo, hi = tango_interval(5, 15, 100)
    lo_ind, hi_ind = newcombe_interval(50, 100, 60, 100)
    lo_dis, hi_dis = tango_interval(45, 55, 100)
    assert hi - lo < 0.7 * (hi_ind - lo_ind) and hi_dis - lo_dis > hi_ind - lo_ind
    # the score test of d0 = 0 rejects at |z| > z_crit: the interval's end sits on 0 at exactly that z
    zc = norm.ppf(0.975)
    assert all((tango_interval(b, c, 200)[0] > 0) == ((c - b) / math.sqrt(b + c) > zc)
               for b in range(0, 12) for c in range(b + 1, 30))


def test_exact_binomial_tail_is_below_the_uncorrected_normal_tail_only_far_out():
    """Where the exact McNemar p is below the normal p of the score statistic at 0, the exact test can
    reject while Tango's interval holds 0 (paired_interval then cuts it); that happens only at
    p < 5.4e-4 (paired_interval's docstring), and it does happen (0 of 12 pairs flipping back)."""
    from scipy.stats import binom, norm

    below = []
    for n_disc in range(1, 401):
        k = np.arange(0, (n_disc + 1) // 2)  # the smaller discordant count, b < c
        exact = 2 * binom.cdf(k, n_disc, 0.5)
        normal = 2 * norm.sf((n_disc - 2 * k) / math.sqrt(n_disc))
        below += normal[exact < normal].tolist()
    assert below and max(below) < 5.4e-4
    assert mcnemar_exact(0, 12) < 5e-4 < 2 * norm.sf(math.sqrt(12))


@pytest.mark.parametrize("alpha", [0.05, 0.01, 0.05 / 3, 5e-4, 1e-4])
def test_paired_interval_excludes_zero_exactly_when_the_exact_test_rejects(alpha):
    seen = {"stretched": 0, "rejected": 0, "kept": 0, "cut": 0}
    for b in range(0, 41):
        for c in range(0, 41):
            for n in {b + c, b + c + 7, 5 * (b + c) + 1} - {0}:
                lo, hi = paired_interval(b, c, n, alpha)
                star = mcnemar_exact(b, c) < alpha
                assert star == (not lo <= 0 <= hi), (b, c, n)
                assert lo <= (c - b) / n <= hi
                t_lo, t_hi = tango_interval(b, c, n, alpha)
                if star and t_lo <= 0 <= t_hi:  # the exact test rejects, the score test does not: cut at 0
                    assert (lo, hi) == ((lo, t_hi) if c > b else (t_lo, hi)) and 0 < abs(lo if c > b else hi)
                    seen["cut"] += 1
                elif star:
                    assert (lo, hi) == (t_lo, t_hi)  # both reject: Tango's interval as it is
                    seen["rejected"] += 1
                elif not t_lo <= 0 <= t_hi:  # the score test rejects, the exact one does not: reach 0
                    assert (lo, hi) in ((0.0, t_hi), (t_lo, 0.0))
                    seen["stretched"] += 1
                else:
                    assert (lo, hi) == (t_lo, t_hi)
                    seen["kept"] += 1
    assert seen["rejected"] > 10 and seen["stretched"] > 10 and seen["kept"] > 10
    assert (seen["cut"] > 0) == (alpha < 5.4e-4)  # only far out in the tail
    assert paired_interval(0, 5, 100) == (0.0, tango_interval(0, 5, 100)[1])  # p = 1/16 > 0.05, z = 2.24 > 1.96


def test_a_cut_interval_ends_at_the_exact_conditional_bound():
    from scipy.stats import beta

    # 12 of 12 discordant pairs one way: exact p = 2 / 4096 < 5e-4, the score test's normal p = 5.3e-4
    lo, hi = paired_interval(0, 12, 50, 5e-4)
    t_lo, t_hi = tango_interval(0, 12, 50, 5e-4)
    assert t_lo < 0 < t_hi and hi == t_hi
    u = beta.ppf(1 - 2.5e-4, 1, 12)  # Clopper-Pearson upper bound of the 0 of 12 that flipped back
    assert u < 0.5 and lo == pytest.approx(12 / 50 * (1 - 2 * u), rel=1e-9) and 0 < lo < 12 / 50
    assert paired_interval(12, 0, 50, 5e-4) == pytest.approx((-hi, -lo))


@pytest.mark.parametrize("n,p_b,p_c", [(40, 0.05, 0.05), (40, 0.2, 0.2), (40, 0.0, 0.1), (40, 0.02, 0.1),
                                       (40, 0.01, 0.3), (30, 0.1, 0.3)])
def test_paired_interval_coverage_is_exact_at_no_difference_and_near_nominal_elsewhere(n, p_b, p_c):
    """The coverage summed over every table of n pairs (multinomial over first only / second only /
    concordant), not simulated."""
    from scipy.stats import multinomial

    d = p_c - p_b
    cover = 0.0
    for b in range(n + 1):
        for c in range(n + 1 - b):
            lo, hi = paired_interval(b, c, n, 0.05)
            if lo <= d <= hi:
                cover += multinomial.pmf([b, c, n - b - c], n, [p_b, p_c, 1 - p_b - p_c])
    # d = 0: the exact test has level 0.05, so coverage >= 95% is guaranteed; elsewhere Tango's is near nominal
    assert cover >= (0.95 if d == 0 else 0.93)


def test_paired_interval_of_nothing_and_bad_input():
    assert all(math.isnan(v) for v in paired_interval(0, 0, 0))
    for bad in ((-1, 2, 10), (6, 6, 10)):
        with pytest.raises(DataError, match="b \\+ c <= n"):
            paired_interval(*bad)
    with pytest.raises(ConfigError, match="alpha"):
        paired_interval(1, 2, 10, 0)


def test_holm_levels_give_holms_decisions():
    assert holm_levels([0.01, 0.04, 0.03], 0.05) == pytest.approx([0.05 / 3, 0.025, 0.025])
    assert holm_levels([0.001, 0.011, 0.03, 0.5], 0.05) == pytest.approx([0.0125, 0.05 / 3, 0.025, 0.025])
    assert holm_levels([], 0.05) == []
    rng = np.random.default_rng(0)
    for _ in range(500):
        p = rng.uniform(0, 0.08, size=int(rng.integers(1, 8))) ** rng.uniform(0.5, 2)
        levels = holm_levels(p, 0.05)
        assert [pi < lv for pi, lv in zip(p, levels)] == [pa < 0.05 for pa in holm(p)]
        assert all(0.05 / len(p) <= lv <= 0.05 for lv in levels)


def test_binomial_cdf_and_bad_input():
    from scipy.stats import binom

    for n in (1, 7, 50, 1001):
        for k in range(-1, n + 2, max(1, n // 13)):
            assert binom_half_cdf(k, n) == pytest.approx(binom.cdf(k, n, 0.5), rel=1e-10, abs=1e-300)
    with pytest.raises(DataError):
        mcnemar_exact(-1, 3)
    with pytest.raises(ConfigError):
        mcnemar_exact(1, 3, "less")


def test_bootstrap_counts_are_the_stratified_bootstraps_draws():
    cats = np.array([[30, 5, 1, 4], [0, 0, 0, 0], [10, 10, 5, 5]])
    counts, ng = bootstrap_counts(cats, 400, np.random.Generator(np.random.PCG64(3)))
    assert ng.tolist() == [40, 30] and all(v.shape == (400, 2) for v in counts.values())
    assert (counts["clean_acc"] + counts["std_err"] == ng).all() and (counts["rob_acc"] + counts["rob_err"] == ng).all()
    assert (counts["clean_acc"] - counts["rob_acc"] == counts["bndy_err"]).all()
    assert counts["rob_acc"].mean(0) == pytest.approx([30, 10], rel=0.05)  # unbiased for each group's count
    rep = stratified_bootstrap(cats, n=400, seed=3)
    worst = (counts["rob_acc"] / ng).min(1)
    assert rep["metrics"]["rob_acc"]["worst"]["mean"] == pytest.approx(float(worst.mean()), abs=0)
