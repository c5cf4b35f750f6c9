"""Gaussian-mixture fixtures (spec section 4): pinned numbers, two closed-form routes, Monte Carlo,
and the exact robust error of linear classifiers against brute force."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from robfair.errors import ConfigError, DataError
from robfair.theory import (
    gaussian_mixture_errors,
    linear_classifier_errors,
    linear_robust_error,
    optimal_linear_classifier,
    sample_gaussian_mixture,
)

SETTING = dict(d=50, eta=0.1, sigma=1.0, K=2.0)


def test_spec_numbers():
    nat = gaussian_mixture_errors(**SETTING)
    rob = gaussian_mixture_errors(**SETTING, eps=0.05)
    assert (round(nat.neg, 4), round(nat.pos, 4)) == (0.1184, 0.4540)
    assert (round(rob.neg, 4), round(rob.pos, 4)) == (0.0598, 0.5284)


@pytest.mark.parametrize("eps", [None, 0.05])
def test_optimal_classifier_reproduces_closed_form_and_is_optimal(eps):
    w, b = optimal_linear_classifier(**SETTING, eps=eps)
    e = 0.0 if eps is None else eps
    errs = linear_classifier_errors(w, b, SETTING["eta"], SETTING["sigma"], SETTING["K"], eps=e)
    closed = gaussian_mixture_errors(**SETTING, eps=eps)
    assert errs["std_err"] == pytest.approx(closed, abs=1e-12)
    # optimal: moving the threshold either way raises the (robust) error averaged over the classes
    key = "rob_err" if eps else "std_err"
    total = lambda bb: sum(linear_classifier_errors(w, bb, 0.1, 1.0, 2.0, eps=e)[key])  # noqa: E731
    for db in (-0.5, -0.05, 0.05, 0.5):
        assert total(b + db) > total(b)


def test_monte_carlo_matches_closed_form():
    x, y = sample_gaussian_mixture(200_000, **SETTING, seed=0)
    for eps in (None, 0.05):
        w, b = optimal_linear_classifier(**SETTING, eps=eps)
        wrong = linear_robust_error(w, b, x, y, 0.0)
        expected = gaussian_mixture_errors(**SETTING, eps=eps)
        for label, p in ((-1, expected.neg), (1, expected.pos)):
            m = y == label
            se = math.sqrt(p * (1 - p) / m.sum())
            assert abs(wrong[m].mean() - p) < 4 * se, (eps, label)
        if eps:
            rob = linear_robust_error(w, b, x, y, eps)
            exact = linear_classifier_errors(w, b, 0.1, 1.0, 2.0, eps=eps)["rob_err"]
            for label, p in ((-1, exact.neg), (1, exact.pos)):
                m = y == label
                assert abs(rob[m].mean() - p) < 4 * math.sqrt(p * (1 - p) / m.sum())
    assert abs((y == 1).mean() - 0.5) < 0.005


def test_robust_tradeoff_direction():
    """Robust training helps the easy class (-1) and hurts the hard one (+1)."""
    nat, rob = gaussian_mixture_errors(**SETTING), gaussian_mixture_errors(**SETTING, eps=0.05)
    assert rob.neg < nat.neg and rob.pos > nat.pos


def test_k_equal_one_is_the_limit():
    lim = gaussian_mixture_errors(d=10, eta=0.2, sigma=1.0, K=1.0 + 1e-7)
    one = gaussian_mixture_errors(d=10, eta=0.2, sigma=1.0, K=1.0)
    assert one.neg == pytest.approx(lim.neg, abs=1e-5) and one.pos == pytest.approx(lim.pos, abs=1e-5)
    assert one.neg == pytest.approx(0.5 * math.erfc(math.sqrt(10) * 0.2 / math.sqrt(2)))


def test_linear_robust_error_linf_brute_force():
    rng = np.random.default_rng(0)
    d, eps = 3, 0.3
    w, b = rng.normal(size=d), 0.2
    x = rng.normal(size=(400, d))
    y = np.where(rng.random(400) < 0.5, -1, 1)
    flagged = linear_robust_error(w, b, x, y, eps, norm="linf")
    # the optimum of a linear function over the box is at a vertex: enumerate all 2^d of them
    vertices = np.array(list(itertools.product([-eps, eps], repeat=d)))  # (8, d)
    worst_margin = (y[:, None] * ((x[:, None, :] + vertices[None]) @ w + b)).min(1)
    np.testing.assert_array_equal(flagged, worst_margin <= 0)
    # the explicit worst-case perturbation -eps * sign(w) * y reaches the boundary exactly for flagged samples
    x_adv = x - eps * np.sign(w)[None] * y[:, None]
    np.testing.assert_array_equal(flagged, y * (x_adv @ w + b) <= 0)
    assert 0 < flagged.mean() < 1


def test_linear_robust_error_l2_and_per_sample_eps():
    rng = np.random.default_rng(1)
    w, b = np.array([3.0, -4.0]), 0.5
    x = rng.normal(size=(300, 2))
    y = np.where(rng.random(300) < 0.5, -1, 1)
    eps = rng.uniform(0, 1, 300)
    flagged = linear_robust_error(w, b, x, y, eps, norm="l2")
    angles = np.linspace(0, 2 * np.pi, 20_001)
    circle = np.stack([np.cos(angles), np.sin(angles)], 1)  # unit directions
    worst = (y[:, None] * ((x[:, None, :] + eps[:, None, None] * circle[None]) @ w + b)).min(1)
    margin = y * (x @ w + b) - eps * 5.0
    clear = np.abs(margin) > 1e-3  # grid search is exact up to ~1e-7 away from the boundary
    np.testing.assert_array_equal(flagged[clear], (worst <= 0)[clear])
    torch = pytest.importorskip("torch")
    assert np.array_equal(linear_robust_error(torch.tensor(w), b, torch.tensor(x), torch.tensor(y), torch.tensor(eps), norm="l2"), flagged)


def test_bad_arguments():
    with pytest.raises(ConfigError, match="eps"):
        gaussian_mixture_errors(**SETTING, eps=0.2)
    with pytest.raises(ConfigError, match="K"):
        gaussian_mixture_errors(d=5, eta=0.1, sigma=1.0, K=0.5)
    with pytest.raises(DataError, match="2\\*y - 1"):
        linear_robust_error(np.ones(2), 0.0, np.zeros((2, 2)), np.array([0, 1]), 0.1)
    with pytest.raises(ConfigError, match="norm"):
        linear_robust_error(np.ones(2), 0.0, np.zeros((2, 2)), np.array([-1, 1]), 0.1, norm="l3")
