"""robfair.metrics.stats against closed forms, published examples and scipy: Wilson, chi-square, the
two-proportion z-test, Newcombe's interval, the exact McNemar test, Holm, the stratified bootstrap, DAFA's rho."""

from __future__ import annotations

import math

import numpy as np
import pytest

from robfair.errors import ConfigError, DataError
from robfair.metrics import GroupReport
from robfair.metrics.stats import (binom_half_cdf, bootstrap_counts, chi2_contingency, dafa_rho, holm, mcnemar_exact,
                                   newcombe_interval, stratified_bootstrap, two_proportion_test, wilson)


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
